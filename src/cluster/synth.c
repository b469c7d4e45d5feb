/* Synthetic references for benchmarks (`patina shard --synthetic N[:SEED]`):
 * a shard fills each partition it hosts with deterministic references
 * instead of loading its bucket, so that a benchmark can measure the query
 * path (front end, NATS, shards, merge) on millions of references that
 * JetStream could not hold on the benchmark machine.
 *
 * Partition p of P holds n_p = N / P references (one more for p < N % P):
 * reference j has id 1 + p + j * P and key "syn-SEED-p-j"; the rows are a
 * pure function of (seed, partition, table, j), the same whoever generates
 * them. Identification tables (rootsift records) get well-formed u8 records
 * of m rows with RootSIFT-like rows (unit L2 norm at scale 512) and
 * geometry, record j being pool[j % CLU_SYNTH_POOL] of a pool drawn from a
 * generator seeded by (SEED, p, table) (a record is tens of kilobytes to
 * make). Every other table gets descriptor bytes 0..7 (the range of CEDD's
 * quantised bins; a family that refuses such bytes, as signature records,
 * is refused by the table and logged), each row drawn from a generator of
 * its own (seeded by SEED, p, table and j): no two rows alike but by
 * chance. (Those rows came from a pool of 256 too, until 2026-12-01: every
 * row of a partition then had some 1,200 exact twins, so that a k-NN
 * query's kth distance was a tie of 1,200 rows in every partition, and the
 * GPU engine, which settles ties exactly, spent a batch's time on them.)
 * Not for correctness tests of answers against photographs: the references
 * are not images. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/rootsift_match.h"
#include "cluster/cluster.h"

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint32_t next(uint64_t *s)
{
    *s = mix(*s);
    return (uint32_t)(*s >> 32);
}

uint64_t clu_synth_count(uint64_t n, uint32_t p, uint32_t partitions)
{
    return n / partitions + (p < n % partitions ? 1 : 0);
}

void clu_synth_key(char *buf, size_t size, uint64_t seed, uint32_t p, uint64_t j)
{
    snprintf(buf, size, "syn-%llu-%u-%llu", (unsigned long long)seed, p, (unsigned long long)j);
}

/* One RootSIFT-like row: non-negative components from a heavy-tailed draw,
 * L2-normalised, at scale 512 (u8, clamped at 255). */
static void rootsift_row(unsigned char *row, uint64_t *s)
{
    double v[RS_DIM], n2 = 0;
    int k;
    for (k = 0; k < RS_DIM; k++) {
        const double u = (double)(next(s) % 1000 + 1);
        v[k] = u * u * u;
        n2 += v[k] * v[k];
    }
    for (k = 0; k < RS_DIM; k++) {
        const double x = floor(512.0 * v[k] / sqrt(n2) + 0.5);
        row[k] = (unsigned char)(x > 255 ? 255 : x);
    }
}

patina_status clu_synth_pool(unsigned char **pool, const patina_table_t *t, uint64_t seed, uint32_t p, size_t table)
{
    const size_t bytes = patina_extractor_bytes(patina_table_extractor(t));
    uint64_t s = mix(seed) ^ mix(((uint64_t)p << 8) | table);
    /* an identification table's record m from its size: 64 + m (128 + 16) bytes at u8 */
    const size_t m = bytes < RS_HEADER ? 0 : (bytes - RS_HEADER) / (RS_DIM + 4 * sizeof(float));
    unsigned char *out;
    size_t i, r;
    *pool = NULL;
    if (!(patina_table_caps(t) & PATINA_CAP_IDENTIFY)) return PATINA_OK; /* rows of their own: clu_synth_desc */
    if (bytes < RS_HEADER || rs_record_bytes(m, RS_QUANT_U8) != bytes)
        return clu_fail(PATINA_E_INVALID, "synthetic: table %s has records of %zu bytes (only u8 rootsift "
                        "records are made)", patina_table_spec(t), bytes);
    if (!(out = malloc(CLU_SYNTH_POOL * bytes + 1)))
        return clu_fail(PATINA_E_NOMEM, "synthetic: out of memory for %d references of %zu bytes", CLU_SYNTH_POOL,
                        bytes);
    memset(out, 0, CLU_SYNTH_POOL * bytes);
    for (i = 0; i < CLU_SYNTH_POOL; i++) {
        unsigned char *rec = out + i * bytes;
        rs_put_header(rec, (uint32_t)m, (uint32_t)m, RS_QUANT_U8, 1.0f, 1024, 1024, 1024, 1024);
        for (r = 0; r < m; r++) {
            unsigned char *g = rec + RS_HEADER + m * RS_DIM + r * 16;
            rootsift_row(rec + RS_HEADER + r * RS_DIM, &s);
            rs_put_f32(g, (float)(next(&s) % 1024));
            rs_put_f32(g + 4, (float)(next(&s) % 1024));
            rs_put_f32(g + 8, 1.0f + (float)(next(&s) % 8));
            rs_put_f32(g + 12, (float)(next(&s) % 628) / 100.0f);
        }
    }
    *pool = out;
    return PATINA_OK;
}

const unsigned char *clu_synth_desc(const unsigned char *pool, unsigned char *row, size_t bytes, uint64_t seed,
                                    uint32_t p, size_t table, uint64_t j)
{
    uint64_t s;
    size_t i = 0;
    if (pool) return pool + (j % CLU_SYNTH_POOL) * bytes;
    s = mix(seed) ^ mix(((uint64_t)p << 8) | table) ^ mix(~j);
    while (i < bytes) { /* ten 3-bit values a draw */
        uint32_t v = next(&s);
        for (int k = 0; k < 10 && i < bytes; k++, v >>= 3) row[i++] = (unsigned char)(v & 7);
    }
    return row;
}
