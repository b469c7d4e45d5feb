/* SHA-256 (FIPS 180-4 §6.2), one-shot and streaming. Used for the content
 * hash of image records and for the hashed form of over-long keys.
 * Plain portable C (big-endian message words are assembled byte by byte,
 * so it is independent of the host's byte order), and on x86-64 CPUs with
 * the SHA extensions the same compression with SHA-NI instructions, ~10x
 * faster (the indexing pipeline hashes every file it reads). Chosen once at
 * run time; tests compare the two. Not constant-time (it hashes public file
 * contents, not secrets). */
#include <stdatomic.h>
#include <string.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define PATINA_SHA_NI 1
#endif

#include "store/sha256_internal.h"
#include "patina/store.h"

static const uint32_t K[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u,
    0xab1c5ed5u, 0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu,
    0x9bdc06a7u, 0xc19bf174u, 0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu,
    0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau, 0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u,
    0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u, 0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu,
    0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u, 0xa2bfe8a1u, 0xa81a664bu,
    0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u, 0x19a4c116u,
    0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u,
    0xc67178f2u,
};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))
#define CH(x, y, z) (((x) & (y)) ^ (~(x) & (z)))
#define MAJ(x, y, z) (((x) & (y)) ^ ((x) & (z)) ^ ((y) & (z)))
#define BSIG0(x) (ROTR(x, 2) ^ ROTR(x, 13) ^ ROTR(x, 22))
#define BSIG1(x) (ROTR(x, 6) ^ ROTR(x, 11) ^ ROTR(x, 25))
#define SSIG0(x) (ROTR(x, 7) ^ ROTR(x, 18) ^ ((x) >> 3))
#define SSIG1(x) (ROTR(x, 17) ^ ROTR(x, 19) ^ ((x) >> 10))

/* One 64-byte block into the state h[8]. */
static void compress(uint32_t h[8], const uint8_t blk[64])
{
    uint32_t w[64], a, b, c, d, e, f, g, hh, t1, t2;
    int t;
    for (t = 0; t < 16; t++)
        w[t] = (uint32_t)blk[4 * t] << 24 | (uint32_t)blk[4 * t + 1] << 16 |
               (uint32_t)blk[4 * t + 2] << 8 | (uint32_t)blk[4 * t + 3];
    for (t = 16; t < 64; t++) w[t] = SSIG1(w[t - 2]) + w[t - 7] + SSIG0(w[t - 15]) + w[t - 16];
    a = h[0]; b = h[1]; c = h[2]; d = h[3]; e = h[4]; f = h[5]; g = h[6]; hh = h[7];
    for (t = 0; t < 64; t++) {
        t1 = hh + BSIG1(e) + CH(e, f, g) + K[t] + w[t];
        t2 = BSIG0(a) + MAJ(a, b, c);
        hh = g; g = f; f = e; e = d + t1;
        d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

static void compress_portable(uint32_t h[8], const uint8_t *p, size_t nblocks)
{
    for (; nblocks; nblocks--, p += 64) compress(h, p);
}

#ifdef PATINA_SHA_NI
/* FIPS 180-4 rounds with the SHA extensions. The state is kept as the
 * instructions want it, {A,B,E,F} and {C,D,G,H}; each SHA256RNDS2 does two
 * rounds with W[t] + K[t] from the low half of its message operand, and
 * SHA256MSG1/MSG2 extend the schedule four words at a time:
 * W[t..t+3] = MSG2(MSG1(W[t-16..], W[t-12..]) + W[t-7..t-4], W[t-4..t-1]). */
__attribute__((target("sha,sse4.1,ssse3"))) static void compress_ni(uint32_t h[8], const uint8_t *p,
                                                                   size_t nblocks)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i abcd = _mm_loadu_si128((const __m128i *)&h[0]);
    __m128i efgh = _mm_loadu_si128((const __m128i *)&h[4]);
    __m128i cdab = _mm_shuffle_epi32(abcd, 0xB1);
    __m128i hgfe = _mm_shuffle_epi32(efgh, 0x1B);
    __m128i abef = _mm_alignr_epi8(cdab, hgfe, 8);
    __m128i cdgh = _mm_blend_epi16(hgfe, cdab, 0xF0);
    for (; nblocks; nblocks--, p += 64) {
        __m128i w[16], save0 = abef, save1 = cdgh;
        int i;
        for (i = 0; i < 16; i++) {
            __m128i m;
            if (i < 4)
                w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
            else
                w[i] = _mm_sha256msg2_epu32(
                    _mm_add_epi32(_mm_sha256msg1_epu32(w[i - 4], w[i - 3]),
                                  _mm_alignr_epi8(w[i - 1], w[i - 2], 4)),
                    w[i - 1]);
            m = _mm_add_epi32(w[i], _mm_loadu_si128((const __m128i *)&K[4 * i]));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, m);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(m, 0x0E));
        }
        abef = _mm_add_epi32(abef, save0);
        cdgh = _mm_add_epi32(cdgh, save1);
    }
    {
        __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
        __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
        _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(feba, dchg, 0xF0));
        _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(dchg, feba, 8));
    }
}

static int cpu_has_sha_ni(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3)) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b >> 29) & 1; /* CPUID.(EAX=7,ECX=0):EBX.SHA[bit 29] */
}
#endif

/* The compression in use: resolved on first use (threads racing to resolve
 * it store the same pointer; atomic, so that the race is defined). */
typedef void (*compress_t)(uint32_t h[8], const uint8_t *p, size_t nblocks);
static _Atomic(compress_t) compress_fn;

static void compress_blocks(uint32_t h[8], const uint8_t *p, size_t nblocks)
{
    compress_t f = atomic_load_explicit(&compress_fn, memory_order_relaxed);
    if (!f) {
        f = compress_portable;
#ifdef PATINA_SHA_NI
        if (cpu_has_sha_ni()) f = compress_ni;
#endif
        atomic_store_explicit(&compress_fn, f, memory_order_relaxed);
    }
    f(h, p, nblocks);
}

int patina__sha256_portable(int on)
{
    atomic_store(&compress_fn, on ? compress_portable : NULL);
#ifdef PATINA_SHA_NI
    return cpu_has_sha_ni();
#else
    return 0;
#endif
}

void patina_sha256_init(patina_sha256_ctx_t *ctx)
{
    static const uint32_t h0[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(ctx->h, h0, sizeof h0);
    ctx->bytes = 0;
    memset(ctx->buf, 0, sizeof ctx->buf);
}

void patina_sha256_update(patina_sha256_ctx_t *ctx, const void *data, size_t size)
{
    const uint8_t *p = data;
    size_t have = (size_t)(ctx->bytes % 64);
    if (size == 0) return;
    ctx->bytes += size;
    if (have) {
        size_t take = 64 - have < size ? 64 - have : size;
        memcpy(ctx->buf + have, p, take);
        p += take;
        size -= take;
        if (have + take < 64) return;
        compress_blocks(ctx->h, ctx->buf, 1);
    }
    if (size >= 64) {
        compress_blocks(ctx->h, p, size / 64);
        p += size / 64 * 64;
        size %= 64;
    }
    if (size) memcpy(ctx->buf, p, size);
}

void patina_sha256_final(patina_sha256_ctx_t *ctx, uint8_t out[32])
{
    /* Padding (§5.1.1): 0x80, zeros to 56 mod 64, then the length in bits
     * as a 64-bit big-endian integer. */
    uint64_t bits = ctx->bytes * 8;
    size_t have = (size_t)(ctx->bytes % 64);
    int i;
    ctx->buf[have++] = 0x80;
    if (have > 56) {
        memset(ctx->buf + have, 0, 64 - have);
        compress_blocks(ctx->h, ctx->buf, 1);
        have = 0;
    }
    memset(ctx->buf + have, 0, 56 - have);
    for (i = 0; i < 8; i++) ctx->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    compress_blocks(ctx->h, ctx->buf, 1);
    for (i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(ctx->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(ctx->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(ctx->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)ctx->h[i];
    }
    memset(ctx, 0, sizeof *ctx);
}

void patina_sha256(uint8_t out[32], const void *data, size_t size)
{
    patina_sha256_ctx_t ctx;
    patina_sha256_init(&ctx);
    if (size) patina_sha256_update(&ctx, data, size);
    patina_sha256_final(&ctx, out);
}
