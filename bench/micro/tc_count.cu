/* Counting throughput of the H100's shared-memory atomics and tensor cores:
 * the numbers behind "one shared atomic per GLCM pair" against one-hot
 * counting on tensor cores (docs/lab/glcm.md, "Tensor cores").
 *
 * Built and run on the device by `sh scripts/device.sh micro` (nvcc there,
 * sm_90a: wgmma needs the architecture-specific target). Not part of the
 * CMake build: it is a measurement, not a product.
 *
 * Every kernel runs a long loop of one instruction kind on every SM, one
 * wave of blocks. The rate is instructions per SM over the launch's event
 * time converted to SM clocks at the clock the GPU really ran (block 0's
 * clock64 against the global timer), not at its nominal boost clock.
 *
 *   atoms      conflict-free warp-wide red.shared.add.u32 (lane l always hits
 *              bank l): the GLCM kernels' counting instruction
 *   mma b1     mma.sync.m16n8k256 .b1 AND-POPC (register operands)
 *   mma u8     mma.sync.m16n8k32 .u8
 *   wgmma b1   wgmma.mma_async m64nNk256 .b1 AND-POPC, A and B from shared
 *              memory (no swizzle), N = 32, 64, 128
 *   wgmma u8   wgmma.mma_async m64nNk32 .u8, N = 32, 128
 *
 * Printed: instructions per SM per clock and, for the tensor cores, bit or
 * byte multiply-accumulates per SM per clock. One GLCM pair at L levels is
 * L * L one-hot products (a 1 in an L x L outer product), so at L = 32 one
 * pair costs 1024 b1 MACs, against 1/32 of a warp atomic. */
#include <stdio.h>
#include <cuda_runtime.h>

#define CHECK(x)                                                                   \
    do {                                                                           \
        cudaError_t e_ = (x);                                                      \
        if (e_ != cudaSuccess) {                                                   \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            return 1;                                                              \
        }                                                                          \
    } while (0)

/* Block 0, thread 0 records (SM clocks, nanoseconds) around its loop. */
__device__ static long long t_clk, t_ns;

__device__ static inline long long global_ns(void)
{
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

#define TIMER_START long long c0_ = clock64(), g0_ = global_ns()
#define TIMER_STOP                                                                 \
    do {                                                                           \
        if (blockIdx.x == 0 && threadIdx.x == 0) {                                 \
            t_clk = clock64() - c0_;                                               \
            t_ns = global_ns() - g0_;                                              \
        }                                                                          \
    } while (0)

__global__ void k_atoms(int iters, unsigned *out)
{
    __shared__ unsigned h[256 * 32];
    for (int i = threadIdx.x; i < 256 * 32; i += blockDim.x)
        h[i] = 0;
    __syncthreads();
    unsigned x = threadIdx.x * 2654435761u, lane = threadIdx.x & 31;
    TIMER_START;
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int u = 0; u < 8; u++) {
            x = x * 1664525u + 1013904223u;
            atomicAdd(&h[((x >> 20) & 255) * 32 + lane], 1u);
        }
    }
    TIMER_STOP;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = h[threadIdx.x];
}

/* Four independent accumulator chains per warp. */
template <bool B1>
__global__ void k_mma(int iters, unsigned *out)
{
    unsigned a0 = threadIdx.x * 0x9E3779B9u, a1 = a0 ^ 0x1234567u, a2 = a0 + 7, a3 = a0 * 3;
    unsigned b0 = a0 ^ 0xdeadbeefu, b1 = a1 + 11;
    int d[4][4] = {};
    TIMER_START;
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int u = 0; u < 4; u++) {
            if (B1)
                asm volatile("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc "
                             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+r"(d[u][0]), "+r"(d[u][1]), "+r"(d[u][2]), "+r"(d[u][3])
                             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0 + u), "r"(b1));
            else
                asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 "
                             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+r"(d[u][0]), "+r"(d[u][1]), "+r"(d[u][2]), "+r"(d[u][3])
                             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0 + u), "r"(b1));
        }
    }
    TIMER_STOP;
    int s = 0;
    for (int u = 0; u < 4; u++)
        s += d[u][0] + d[u][1] + d[u][2] + d[u][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

/* wgmma operand lists: the accumulators are %0..%(R-1), the descriptors
 * %R and %(R+1). */
#define ACC16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define ACC32 \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define ACC64 \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define O4(i) "+r"(d[i]), "+r"(d[i + 1]), "+r"(d[i + 2]), "+r"(d[i + 3])
#define O16(i) O4(i), O4(i + 4), O4(i + 8), O4(i + 12)
#define OUT16 O16(0)
#define OUT32 O16(0), O16(16)
#define OUT64 O16(0), O16(16), O16(32), O16(48)

/* No-swizzle K-major descriptors: start address, leading (K) byte offset
 * 128, stride (M/N) byte offset 256; the data are arbitrary bits. */
__device__ static inline unsigned long long wg_desc(unsigned addr)
{
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (unsigned long long)(128 >> 4) << 16 |
           (unsigned long long)(256 >> 4) << 32;
}

/* The wgmma kernels' shared operand area (16 KB of arbitrary bits) and its
 * shared-window address; and their result, so the products are not dead. */
__device__ static inline unsigned wg_smem(unsigned char *sm)
{
    for (int i = threadIdx.x; i < 16384 / 4; i += blockDim.x)
        ((unsigned *)sm)[i] = i * 2654435761u;
    __syncthreads();
    return (unsigned)__cvta_generic_to_shared(sm);
}

__device__ static inline void wg_out(const int *d, int n, unsigned *out)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += d[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

#define WG_KERNEL(name, R, shape, types, ACC, OUTS, NS, N1S)                       \
    __global__ void name(int iters, unsigned *out)                                 \
    {                                                                              \
        extern __shared__ __align__(1024) unsigned char sm[];                      \
        unsigned base = wg_smem(sm);                                               \
        unsigned long long da = wg_desc(base), db = wg_desc(base + 8192);          \
        int d[R] = {};                                                             \
        TIMER_START;                                                               \
        for (int it = 0; it < iters; it++) {                                       \
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");              \
            _Pragma("unroll") for (int u = 0; u < 8; u++)                          \
                asm volatile("wgmma.mma_async.sync.aligned." shape ".s32." types " " ACC \
                             ", %" NS ", %" N1S ", 1;\n"                           \
                             : OUTS                                                \
                             : "l"(da), "l"(db));                                  \
            asm volatile("wgmma.commit_group.sync.aligned;\n"                      \
                         "wgmma.wait_group.sync.aligned 0;\n" ::: "memory");       \
        }                                                                          \
        TIMER_STOP;                                                                \
        wg_out(d, R, out);                                                         \
    }

/* The same with A in registers (4 registers per thread: a 64 x 256-bit
 * tile), so only B is read from shared memory. */
#define WG_KERNEL_RS(name, R, shape, ACC, OUTS, ALIST, DS)                            \
    __global__ void name(int iters, unsigned *out)                                 \
    {                                                                              \
        extern __shared__ __align__(1024) unsigned char sm[];                      \
        unsigned base = wg_smem(sm);                                               \
        unsigned long long db = wg_desc(base + 8192);                              \
        unsigned a0 = threadIdx.x * 0x9E3779B9u, a1 = a0 ^ 0x1234567u, a2 = a0 + 7, a3 = a0 * 3; \
        int d[R] = {};                                                             \
        TIMER_START;                                                               \
        for (int it = 0; it < iters; it++) {                                       \
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");              \
            _Pragma("unroll") for (int u = 0; u < 8; u++)                          \
                asm volatile("wgmma.mma_async.sync.aligned." shape                 \
                             ".s32.b1.b1.and.popc " ACC ", " ALIST ", %" DS ", 1;\n" \
                             : OUTS                                                \
                             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));       \
            asm volatile("wgmma.commit_group.sync.aligned;\n"                      \
                         "wgmma.wait_group.sync.aligned 0;\n" ::: "memory");       \
        }                                                                          \
        TIMER_STOP;                                                                \
        wg_out(d, R, out);                                                         \
    }

WG_KERNEL(k_wg_b1_n32, 16, "m64n32k256", "b1.b1.and.popc", ACC16, OUT16, "16", "17")
WG_KERNEL(k_wg_b1_n64, 32, "m64n64k256", "b1.b1.and.popc", ACC32, OUT32, "32", "33")
WG_KERNEL(k_wg_b1_n128, 64, "m64n128k256", "b1.b1.and.popc", ACC64, OUT64, "64", "65")
WG_KERNEL_RS(k_wg_b1_n32_rs, 16, "m64n32k256", ACC16, OUT16, "{%16,%17,%18,%19}", "20")
WG_KERNEL_RS(k_wg_b1_n64_rs, 32, "m64n64k256", ACC32, OUT32, "{%32,%33,%34,%35}", "36")
WG_KERNEL(k_wg_u8_n32, 16, "m64n32k32", "u8.u8", ACC16, OUT16, "16", "17")
WG_KERNEL(k_wg_u8_n128, 64, "m64n128k32", "u8.u8", ACC64, OUT64, "64", "65")

struct case_ {
    const char *name;
    void (*kernel)(int, unsigned *);
    int threads, blocks_per_sm, smem, iters;
    double inst_per_iter_per_block; /* warp instructions (atoms, mma) or wgmma per warpgroup */
    double macs;                    /* per instruction; 0 for atomics */
};

int main(void)
{
    int sms;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const struct case_ cases[] = {
        {"atoms (warp red.shared)", k_atoms, 256, 4, 0, 40000, 8.0 * 8, 0},
        {"mma.sync b1 m16n8k256", k_mma<true>, 256, 4, 0, 20000, 8.0 * 4, 16.0 * 8 * 256},
        {"mma.sync u8 m16n8k32", k_mma<false>, 256, 4, 0, 20000, 8.0 * 4, 16.0 * 8 * 32},
        {"wgmma b1 m64n32k256", k_wg_b1_n32, 128, 4, 16384, 4000, 8, 64.0 * 32 * 256},
        {"wgmma b1 m64n64k256", k_wg_b1_n64, 128, 2, 16384, 4000, 8, 64.0 * 64 * 256},
        {"wgmma b1 m64n128k256", k_wg_b1_n128, 128, 2, 16384, 4000, 8, 64.0 * 128 * 256},
        {"wgmma b1 m64n32k256, A in registers", k_wg_b1_n32_rs, 128, 4, 16384, 4000, 8, 64.0 * 32 * 256},
        {"wgmma b1 m64n64k256, A in registers", k_wg_b1_n64_rs, 128, 2, 16384, 4000, 8, 64.0 * 64 * 256},
        {"wgmma u8 m64n32k32", k_wg_u8_n32, 128, 4, 16384, 4000, 8, 64.0 * 32 * 32},
        {"wgmma u8 m64n128k32", k_wg_u8_n128, 128, 2, 16384, 4000, 8, 64.0 * 128 * 32},
    };
    unsigned *out;
    CHECK(cudaMalloc(&out, (size_t)sms * 8 * 256 * sizeof *out));
    printf("%s, %d SMs\n", prop.name, sms);
    printf("| instruction | blocks/SM | SM clock (GHz) | inst/SM/clk | MAC/SM/clk |\n|---|---|---|---|---|\n");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const struct case_ *k = &cases[c];
        int blocks = sms * k->blocks_per_sm, iters = k->iters;
        if (k->smem)
            CHECK(cudaFuncSetAttribute(k->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, k->smem));
        k->kernel<<<blocks, k->threads, k->smem>>>(8, out); /* warm-up */
        CHECK(cudaDeviceSynchronize());
        cudaEvent_t e0, e1;
        CHECK(cudaEventCreate(&e0));
        CHECK(cudaEventCreate(&e1));
        CHECK(cudaEventRecord(e0));
        k->kernel<<<blocks, k->threads, k->smem>>>(iters, out);
        CHECK(cudaEventRecord(e1));
        CHECK(cudaGetLastError());
        CHECK(cudaEventSynchronize(e1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        long long clk, ns;
        CHECK(cudaMemcpyFromSymbol(&clk, t_clk, sizeof clk));
        CHECK(cudaMemcpyFromSymbol(&ns, t_ns, sizeof ns));
        /* The SM clock the kernel ran at, from block 0's clock64 and global
         * timer; the cycles from the whole launch's time at that clock. */
        double ghz = (double)clk / ns, cycles = ms * 1e6 * ghz;
        double per_sm = k->inst_per_iter_per_block * k->blocks_per_sm * iters / cycles;
        printf("| %s | %d | %.2f | %.4f | ", k->name, k->blocks_per_sm, ghz, per_sm);
        if (k->macs > 0)
            printf("%.0f |\n", per_sm * k->macs);
        else
            printf("- (%.2f clocks per instruction) |\n", 1.0 / per_sm);
    }
    cudaFree(out);
    return 0;
}
