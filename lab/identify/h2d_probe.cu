// Lab probe (docs/lab/identify.md): host-to-device copy rates of the shapes the hybrid cache uses --
// chunks of a large pinned buffer into device staging buffers, over 1 or 3 streams.
//   nvcc -O2 -o h2d_probe lab/identify/h2d_probe.cu && ./h2d_probe [GiB]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static double run(char *host, size_t total, size_t chunk, int nstreams, char **dst, cudaStream_t *st, int hostreg)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, 0);
    for (int i = 0; i < nstreams; i++) cudaStreamWaitEvent(st[i], a, 0);
    int k = 0;
    for (size_t off = 0; off + chunk <= total; off += chunk, k = (k + 1) % nstreams)
        cudaMemcpyAsync(dst[k], host + off, chunk, cudaMemcpyHostToDevice, st[k]);
    for (int i = 0; i < nstreams; i++) {
        cudaEvent_t e;
        cudaEventCreate(&e);
        cudaEventRecord(e, st[i]);
        cudaStreamWaitEvent(0, e, 0);
    }
    cudaEventRecord(b, 0);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    (void)hostreg;
    return (double)(total / chunk * chunk) / (ms / 1e3) / 1e9;
}

int main(int argc, char **argv)
{
    size_t gib = argc > 1 ? atol(argv[1]) : 8, total = gib << 30;
    char *host;
    if (cudaHostAlloc((void **)&host, total, cudaHostAllocPortable) != cudaSuccess) return 1;
    memset(host, 1, total);
    cudaStream_t st[3];
    char *dst[3];
    for (int i = 0; i < 3; i++) {
        cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking);
        cudaMalloc(&dst[i], 256 << 20);
    }
    const size_t chunks[] = {4 << 20, 16 << 20, 64 << 20, 256 << 20};
    for (int ns = 1; ns <= 3; ns += 2)
        for (size_t c : chunks) {
            run(host, total, c, ns, dst, st, 0);
            printf("cudaHostAlloc %zu GiB, chunks of %zu MiB, %d stream(s): %.1f GB/s\n", gib, c >> 20, ns,
                   run(host, total, c, ns, dst, st, 0));
        }
    // the same through a malloc'd buffer registered with cudaHostRegister
    char *m = (char *)aligned_alloc(2 << 20, total);
    memset(m, 1, total);
    if (cudaHostRegister(m, total, cudaHostRegisterPortable) == cudaSuccess) {
        for (size_t c : chunks)
            printf("malloc + cudaHostRegister, chunks of %zu MiB, 3 streams: %.1f GB/s\n", c >> 20,
                   run(m, total, c, 3, dst, st, 1));
    } else {
        printf("cudaHostRegister failed\n");
    }
    return 0;
}
