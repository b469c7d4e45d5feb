/* Entropy decoding of one baseline Huffman scan, in parallel pieces: the
 * rules shared verbatim by the C reference (src/image/jpeg_huff.c) and the
 * CUDA kernels (src/gpu/jpeg_huff.cu), as src/algo/jpeg_exact_core.h is for
 * the arithmetic after it. The code is ours; the behaviour to match is
 * libjpeg-turbo's jpeg_read_coefficients (jdhuff.c) on valid data.
 *
 * Input: the scan's entropy-coded bytes already destuffed (FF00 -> FF, the
 * host side of jpeg_huff.c), cut at its restart markers into intervals, each
 * a byte string decoded from a known state (first block of an MCU, DC
 * predictors 0). Every interval is cut into chunks of the image's
 * sc.chunk_bits bits (JH_CHUNK_BITS unless the caller chose another size);
 * one thread (or one loop iteration of the reference) per chunk:
 *
 *   1. init    each chunk decodes its own bits from a guessed state (its
 *              first bit starts a DC codeword of an MCU's first block; exact
 *              for the first chunk of an interval) and records its exit
 *              state: the first codeword start at or after its end, the block
 *              of the MCU and the coefficient index there, the blocks it
 *              completed (jh_state_t). A guessed decode reads on where an
 *              exact one would stop (a code no table has, a run past
 *              coefficient 63): stopped, it could never fall in step with the
 *              true decode, and on camera photographs most guesses met such a
 *              spot before they did (docs/lab/jpeg.md).
 *   2. rounds  JH_ROUNDS Jacobi rounds: a chunk whose predecessor's exit
 *              changed decodes again from that exit (double-buffered, so the
 *              result does not depend on the order of the threads) until it
 *              falls in step with its own guessed decode (the first JH_REC
 *              codeword boundaries of which init recorded); Huffman codes
 *              synchronise themselves within a few codewords (the place in
 *              the MCU: often a hundred or more), so this is short and a few
 *              rounds usually leave nothing to do; a round with no chunk
 *              marked costs a launch (Weissenberger and Schmidt, "Massively
 *              parallel Huffman decoding on GPUs", 2018).
 *   3. settle  one thread per interval walks its chunks in order and decodes
 *              again those still marked (usually none), so every exit is then
 *              the exact state; and sums the blocks: each chunk's first block.
 *   4. write   each chunk decodes from its exact entry, writes its blocks'
 *              non-zero coefficients into zeroed memory (natural order, AC
 *              values, DC as running sums of the chunk's differences per
 *              component) and flags anomalies.
 *   5. dc      one thread per interval: per component, each chunk's DC offset
 *              (the sum of the differences before it); then 6. each chunk adds
 *              it to its blocks' DC values.
 *
 * Exactness. Anything libjpeg would warn about or fail on, and more, flags
 * the image (JH_E_*) and the caller decodes it with libjpeg-turbo instead: a
 * code no table has (longer than 16 bits), a block running past coefficient
 * 63, a codeword needing bits beyond its interval's data (libjpeg: "premature
 * end"), an interval with more data than its MCUs (whole bytes after the last
 * block: libjpeg's extraneous bytes) or fewer. Without a flag the data is a
 * valid scan, which every correct decoder turns into the same coefficients;
 * DC values are kept modulo 2^16, as libjpeg's (JCOEF) cast does. A guessed
 * decode's reading on past an error cannot change that: a chunk takes a
 * guess's exit only from a boundary where its exact decode is in the same
 * state, and the write step decodes every chunk exactly from its exact entry,
 * flagging any error there. */
#ifndef PATINA_JPEG_HUFF_CORE_H
#define PATINA_JPEG_HUFF_CORE_H

#include <stdint.h>

#ifdef __CUDACC__
#define JH_FN static __host__ __device__ __forceinline__
#else
#define JH_FN static inline
#endif
/* Reads of data no step writes (tables, scans): on the device through the
 * read-only path, which also lets the compiler move them past the
 * coefficient stores. */
#ifdef __CUDA_ARCH__
#define JH_LDG(p) __ldg(p)
#else
#define JH_LDG(p) (*(p))
#endif

#define JH_CHUNK_BITS 4096u /* bits of one chunk (512 bytes) by default */
#define JH_CHUNK_MIN 512u   /* the sizes a caller may choose: multiples of 8 from JH_CHUNK_MIN to JH_CHUNK_MAX */
#define JH_CHUNK_MAX 65536u
#define JH_ROUNDS 32        /* Jacobi rounds before the per-interval settle */
#define JH_SETTLE_MAX 8     /* chunks one interval's settle decodes again before it gives up (JH_E_SLOW) */
#define JH_MAX_BLK 10       /* blocks in an MCU (libjpeg's D_MAX_BLOCKS_IN_MCU) */
#define JH_LOOK 8           /* bits of the direct lookup */

/* Flags of an image (or of a state reached from a guess). */
enum {
    JH_OK = 0,
    JH_E_CODE = 1,  /* no code of 16 bits or fewer matches */
    JH_E_RUN = 2,   /* a block runs past coefficient 63 */
    JH_E_END = 4,   /* a codeword needs bits beyond its interval */
    JH_E_LONG = 8,  /* data after an interval's last block */
    JH_E_SHORT = 16, /* an interval ends before its last block */
    /* not an error: the chunks of an interval did not fall in step within the
     * rounds and JH_SETTLE_MAX serial re-decodes (a decode that stays out of
     * phase with the MCU's blocks for thousands of codewords, as some
     * photographs without restart markers do); one GPU thread decoding the
     * rest in order would be far slower than libjpeg on a CPU thread */
    JH_E_SLOW = 32
};

/* One Huffman table, canonical (JPEG Annex C), as jh_table_build derives it. */
typedef struct jh_table {
    int32_t maxcode[18];        /* the largest code of length l, -1 when none (l = 1..16) */
    int32_t valoff[18];         /* code c of length l is symbol val[c + valoff[l]] */
    uint16_t look[1 << JH_LOOK];/* the next JH_LOOK bits -> (length << 8) | symbol; 0: a longer code */
    uint8_t val[256];
} jh_table_t;

/* The geometry of one scan (all the image's components, interleaved, or the
 * one component of a greyscale image) and where its blocks go. */
typedef struct jh_scan {
    int32_t nblk;                /* blocks in an MCU */
    int32_t mcus_per_row, mcu_rows;
    int32_t restart;             /* MCUs per restart interval, 0: none */
    uint8_t bcomp[JH_MAX_BLK];   /* component (frame order) of block b of an MCU */
    uint8_t bdc[JH_MAX_BLK];     /* its DC table: index into the image's tables */
    uint8_t bac[JH_MAX_BLK];     /* its AC table */
    uint8_t bx[JH_MAX_BLK];      /* its column and row in the MCU, in the component's blocks */
    uint8_t by[JH_MAX_BLK];
    uint8_t ncomp;
    uint8_t same;                /* every block of the MCU decodes with tables of the same contents: the
                                  * place in the MCU does not change the codewords, so decodes fall in step
                                  * on position and coefficient alone and the settle sets the block of the
                                  * MCU from the block count (RGB and CMYK files written with one table
                                  * set) */
    uint32_t chunk_bits;         /* bits of one chunk (JH_CHUNK_MIN..JH_CHUNK_MAX, a multiple of 8): smaller
                                  * chunks, more threads (the decoder's choice per call; the coefficients
                                  * do not depend on it) */
    int32_t cmw[4], cmh[4];      /* a component's MCU width and height in blocks */
    int32_t cbw[4], cbh[4];      /* its blocks stored per row, block rows (jx_comp_t bw, bh) */
    uint32_t cfirst[4];          /* its first block in the image's (nblocks, 64) coefficients */
} jh_scan_t;

/* A decoder's state between two codewords. */
typedef struct jh_state {
    uint32_t pos;   /* bit of the interval where the next codeword starts */
    uint32_t nb;    /* blocks completed since the decode started */
    uint8_t blkn;   /* block of the MCU */
    uint8_t k;      /* zig-zag index of the next coefficient: 0 its DC, 1..63 an AC */
    uint8_t err;    /* JH_E_* met (the decode stopped there) */
    uint8_t pad;
} jh_state_t;

/* The natural-order position of zig-zag coefficient k (JPEG Figure A.6):
 * the host's table here, the kernels' in shared memory (jh_out_t.zz). */
#define JH_ZIGZAG                                                                                              \
    {0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,                 \
     41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,                 \
     30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63}
static const uint8_t jh_zigzag_host[64] = JH_ZIGZAG;

/* Derives t from a DHT table (bits[1..16] code counts, val symbols).
 * 0, or -1 when the counts do not describe a prefix code (libjpeg:
 * JERR_BAD_HUFF_TABLE) or list more than 256 symbols. */
JH_FN int jh_table_build(jh_table_t *t, const uint8_t bits[17], const uint8_t *val)
{
    int32_t code = 0;
    int n = 0, l, i;
    for (l = 1; l <= 16; l++) n += bits[l];
    if (n > 256) return -1;
    for (i = 0; i < 256; i++) t->val[i] = i < n ? val[i] : 0;
    for (i = 0; i < (1 << JH_LOOK); i++) t->look[i] = 0;
    n = 0;
    for (l = 1; l <= 16; l++) {
        int cnt = bits[l];
        /* libjpeg refuses a table whose codes of length l reach the all-ones
         * string (JERR_BAD_HUFF_TABLE); checked before any is written */
        if (code + cnt >= (1 << l)) return -1;
        if (cnt) {
            t->valoff[l] = n - code;
            for (i = 0; i < cnt; i++, n++, code++) {
                if (l <= JH_LOOK) {
                    int span = 1 << (JH_LOOK - l), first = code << (JH_LOOK - l);
                    for (int j = 0; j < span; j++) t->look[first + j] = (uint16_t)(l << 8 | t->val[n]);
                }
            }
            t->maxcode[l] = code - 1;
        } else {
            t->maxcode[l] = -1;
            t->valoff[l] = 0;
        }
        code <<= 1;
    }
    t->maxcode[0] = t->maxcode[17] = -1;
    t->valoff[0] = t->valoff[17] = 0;
    return 0;
}

/* The 4 bytes of d from byte w on as one big-endian word, bytes at or beyond
 * n read as 0. d must have 8 readable bytes after byte n - 1 and, on the
 * device, readable bytes back to the 4-byte boundary at or before d + w
 * (the staged data is 8-byte aligned and followed by 8 bytes). */
JH_FN uint32_t jh_load4(const uint8_t *d, uint32_t w, uint32_t n)
{
    if (w + 4 <= n) {
#ifdef __CUDA_ARCH__
        uintptr_t a = (uintptr_t)(d + w);
        const uint32_t *p = (const uint32_t *)(a & ~(uintptr_t)3);
        uint32_t x = __funnelshift_r(__ldg(p), __ldg(p + 1), (unsigned)(a & 3) * 8);
        return __byte_perm(x, 0, 0x0123);
#else
        return (uint32_t)d[w] << 24 | (uint32_t)d[w + 1] << 16 | (uint32_t)d[w + 2] << 8 | d[w + 3];
#endif
    }
    {
        uint32_t v = 0;
        for (int i = 0; i < 4; i++) v = v << 8 | (w + (uint32_t)i < n ? d[w + (uint32_t)i] : 0u);
        return v;
    }
}

/* The 32 bits of d from bit pos on (first bit the most significant), those
 * at or beyond bit `end` read as 0, through the decoder's loader
 * (jh_load4; tests). d as for jh_load4 with n = the bytes holding `end`
 * bits. */
JH_FN uint32_t jh_peek(const uint8_t *d, uint32_t end, uint32_t pos)
{
    uint32_t w = pos >> 3, n = (end + 7) >> 3, left = end - pos;
    uint64_t x = (uint64_t)jh_load4(d, w, n) << 32 | jh_load4(d, w + 4, n);
    uint32_t v = (uint32_t)(x >> (32 - (pos & 7)));
    if (left < 32) v = left ? v & ~(0xFFFFFFFFu >> left) : 0;
    return v;
}

/* The codeword at the front of v: its symbol, and its length in *len (0: no
 * code of 16 bits or fewer matches). */
JH_FN int jh_symbol(const jh_table_t *t, uint32_t v, int *len)
{
    uint32_t e = JH_LDG(&t->look[v >> (32 - JH_LOOK)]);
    if (e) {
        *len = (int)(e >> 8);
        return (int)(e & 255);
    }
    for (int l = JH_LOOK + 1; l <= 16; l++) {
        int32_t code = (int32_t)(v >> (32 - l));
        if (code <= JH_LDG(&t->maxcode[l])) {
            *len = l;
            return JH_LDG(&t->val[(code + JH_LDG(&t->valoff[l])) & 255]);
        }
    }
    *len = 0;
    return 0;
}

/* The signed value of `s` extra bits r (JPEG F.2.2.1 EXTEND). */
JH_FN int32_t jh_extend(uint32_t r, int s)
{
    return r < (1u << (s - 1)) ? (int32_t)r - (int32_t)((1u << s) - 1) : (int32_t)r;
}

/* Where a chunk's decode writes: the image's coefficients, the interval's
 * first MCU, the chunk's first block in the interval and its running DC sums. */
typedef struct jh_out {
    int16_t *coef;     /* the image's (nblocks, 64) s16, all zero beforehand: only non-zero
                        * coefficients are written, and a block that straddles two chunks
                        * is written by both */
    uint32_t mcu0;     /* the interval's first MCU */
    uint32_t g0;       /* the interval-relative index of the decode's first block */
    int32_t dc[4];     /* per component: the sum of the DC differences decoded so far */
    const uint8_t *zz; /* the natural position of zig-zag coefficient k (JH_ZIGZAG; the kernel's copy
                        * in shared memory) */
} jh_out_t;

/* The (nblocks, 64) index of block b of the MCU in MCU column mx, row my, or
 * -1 for a block outside the stored area (the dummy blocks of partial MCUs
 * at the right and bottom edges). */
JH_FN int64_t jh_block_in(const jh_scan_t *sc, uint32_t mx, uint32_t my, int b)
{
    int c = sc->bcomp[b];
    int32_t x = (int32_t)mx * sc->cmw[c] + sc->bx[b];
    int32_t y = (int32_t)my * sc->cmh[c] + sc->by[b];
    if (x >= sc->cbw[c] || y >= sc->cbh[c]) return -1;
    return (int64_t)sc->cfirst[c] + (int64_t)y * sc->cbw[c] + x;
}

/* The same for interval-relative block g of an interval starting at MCU mcu0. */
JH_FN int64_t jh_block_at(const jh_scan_t *sc, uint32_t mcu0, uint32_t g)
{
    uint32_t m = mcu0 + g / (uint32_t)sc->nblk;
    return jh_block_in(sc, m % (uint32_t)sc->mcus_per_row, m / (uint32_t)sc->mcus_per_row, (int)(g % (uint32_t)sc->nblk));
}

/* A codeword boundary of a chunk's guessed decode (jh_step_init records
 * JH_REC of them: its first JH_REC / 2 boundaries, then ever sparser ones,
 * each 1.5 times as many codewords on as the last, so they reach across the
 * chunk): the rounds recognise there that a decode from another entry has
 * fallen in step with it, and stop. Falling in step takes a few codewords
 * for the bit position, often hundreds for the place in the MCU. */
typedef struct jh_rec {
    uint32_t pos;   /* UINT32_MAX: none */
    uint32_t st;    /* blocks completed (16 bits) | blkn << 16 | k << 20 */
} jh_rec_t;

#define JH_REC 32
#define JH_REC_KEY(blkn, k) ((uint32_t)(blkn) | (uint32_t)(k) << 4)

/* Decodes the codewords of interval data d (end bits) that start before bit
 * `stop`, from state *s, stopping early at an error or once `limit` blocks
 * are complete; with `guess` (a decode from a guessed state, whose codewords
 * are not yet known to be the scan's) it does not stop at an error but
 * reads on: a code no table has as one bit (a DC of size 0, an end of
 * block), a run past coefficient 63 as the block's end. With o, writes the
 * coefficients decoded at their places. With rec, records the entry and boundaries after it (JH_REC in all, see
 * jh_rec_t; the rest UINT32_MAX). With match (JH_REC boundaries of another decode
 * of the same chunk, increasing), stops at the first boundary where both are
 * in the same state (position, block of the MCU, coefficient): returns its
 * index (s then holds the state there), else -1.
 *
 * Bits are read through a 64-bit window refilled 32 bits at a time from a
 * word loaded one refill ahead (bytes at or beyond `end` read as 0): the
 * codeword at pos is the window's top bits. The tables of the current block of the MCU are looked up once per
 * block, and with o the block's place is followed MCU by MCU (one division
 * at the entry). */
JH_FN int jh_decode(const jh_scan_t *sc, const jh_table_t *tab, const uint8_t *d, uint32_t end, uint32_t stop,
                    uint32_t limit, jh_state_t *s, jh_out_t *o, jh_rec_t *rec, const jh_rec_t *match, int guess)
{
    uint32_t pos = s->pos, nb = s->nb, len8 = end >> 3, wbyte = pos >> 3;
    int blkn = s->blkn, k = s->k, err = 0, nrec = 0, mi = 0, found = -1;
    const int nblk = sc->nblk;
    uint32_t ncw = 0, next_rec = 0; /* codewords decoded; the next one to record after */
    int16_t *blk = 0;
    uint64_t win;
    int wbits;
    const jh_table_t *tdc = tab + sc->bdc[blkn], *tac = tab + sc->bac[blkn];
    int comp = sc->bcomp[blkn];
    uint32_t mx = 0, my = 0; /* with o: the MCU of the current block, and its block by place */
    int pb = 0;
    uint32_t dc0 = 0, dc1 = 0, dc2 = 0, dc3 = 0; /* with o: its DC sums */
    uint32_t mpos = match ? match[0].pos : 0; /* with match: the position of boundary mi */
    uint32_t nw; /* the next 4 bytes, loaded a refill ahead (the load's latency off the decode's path) */
    /* the window: bits from pos on, the first at the top */
    win = (uint64_t)jh_load4(d, wbyte, len8) << 32;
    nw = jh_load4(d, wbyte + 4, len8);
    wbyte += 8;
    wbits = 32 - (int)(pos & 7);
    win <<= pos & 7;
    if (o) {
        uint32_t g = o->g0 + nb, m = o->mcu0 + g / (uint32_t)nblk;
        dc0 = (uint32_t)o->dc[0], dc1 = (uint32_t)o->dc[1], dc2 = (uint32_t)o->dc[2], dc3 = (uint32_t)o->dc[3];
        mx = m % (uint32_t)sc->mcus_per_row;
        my = m / (uint32_t)sc->mcus_per_row;
        pb = (int)(g % (uint32_t)nblk);
        if (k != 0) { /* entered in the middle of a block: find it again */
            int64_t a = jh_block_in(sc, mx, my, pb);
            blk = a < 0 ? 0 : o->coef + a * 64;
        }
    }
    for (;;) {
        /* a boundary: record it, or compare it */
        if (rec && nrec < JH_REC && ncw == next_rec && nb <= 0xFFFF) {
            rec[nrec].pos = pos;
            rec[nrec].st = nb | JH_REC_KEY(blkn, k) << 16;
            nrec++;
            next_rec = nrec < JH_REC / 2 ? ncw + 1 : ncw + (ncw + 1) / 2;
        }
        if (match && pos >= mpos) { /* at or past the next boundary (mpos: match[mi].pos, kept in a register) */
            while (mi < JH_REC && match[mi].pos < pos) mi++;
            if (mi == JH_REC) {
                match = 0; /* past its last boundary: decode on */
            } else {
                mpos = match[mi].pos;
                if (mpos == pos &&
                    (sc->same ? (match[mi].st >> 20) == (uint32_t)k : (match[mi].st >> 16) == JH_REC_KEY(blkn, k))) {
                    found = mi;
                    break;
                }
            }
        }
        if (!(pos < stop && nb < limit)) break;
        if (wbits <= 32) {
            win |= (uint64_t)nw << (32 - wbits);
            nw = jh_load4(d, wbyte, len8);
            wbyte += 4;
            wbits += 32;
        }
        {
            uint32_t v = (uint32_t)(win >> 32);
            int len, sym, size, used;
            if (k == 0) {
                int32_t diff = 0;
                sym = jh_symbol(tdc, v, &len);
                if (!len) {
                    if (!guess) {
                        err = JH_E_CODE;
                        break;
                    }
                    len = 1; /* a guess reads the bit as a DC codeword of size 0 */
                    sym = 0;
                }
                size = sym & 15; /* DC tables hold 0..15 (jh_table_build's caller checks) */
                if ((uint32_t)(len + size) > end - pos) {
                    err = JH_E_END;
                    break;
                }
                if (size) diff = jh_extend((v << len) >> (32 - size), size);
                if (o) {
                    int64_t a = jh_block_in(sc, mx, my, pb);
                    uint32_t sum; /* modulo 2^32: 16 bits are kept */
                    /* the sums stay in registers (a switch, not an index) */
                    switch (comp) {
                    case 0: sum = dc0 += (uint32_t)diff; break;
                    case 1: sum = dc1 += (uint32_t)diff; break;
                    case 2: sum = dc2 += (uint32_t)diff; break;
                    default: sum = dc3 += (uint32_t)diff; break;
                    }
                    blk = a < 0 ? 0 : o->coef + a * 64;
                    if (blk) blk[0] = (int16_t)(uint16_t)sum;
                }
                k = 1;
            } else {
                int r;
                sym = jh_symbol(tac, v, &len);
                if (!len) {
                    if (!guess) {
                        err = JH_E_CODE;
                        break;
                    }
                    len = 1; /* a guess reads the bit as an end of block */
                    sym = 0;
                }
                r = sym >> 4;
                size = sym & 15;
                if ((uint32_t)(len + size) > end - pos) {
                    err = JH_E_END;
                    break;
                }
                if (size) {
                    k += r;
                    if (k > 63) {
                        if (!guess) {
                            err = JH_E_RUN;
                            break;
                        }
                        k = 63; /* a guess ends the block with this coefficient */
                    }
                    if (blk) blk[o->zz[k]] = (int16_t)jh_extend((v << len) >> (32 - size), size);
                    k++;
                } else if (r == 15) { /* sixteen zeros */
                    k += 16;
                    if (k > 64) {
                        if (!guess) {
                            err = JH_E_RUN;
                            break;
                        }
                        k = 64; /* a guess ends the block there */
                    }
                } else { /* end of block (libjpeg reads runs 1..14 without a size as one too) */
                    k = 64;
                }
            }
            used = len + size;
            ncw++;
            pos += (uint32_t)used;
            win <<= used;
            wbits -= used;
        }
        if (k == 64) {
            k = 0;
            nb++;
            if (++blkn == nblk) blkn = 0;
            tdc = tab + sc->bdc[blkn];
            tac = tab + sc->bac[blkn];
            comp = sc->bcomp[blkn];
            if (o && ++pb == nblk) {
                pb = 0;
                if (++mx == (uint32_t)sc->mcus_per_row) {
                    mx = 0;
                    my++;
                }
            }
        }
    }
    if (rec)
        for (; nrec < JH_REC; nrec++) {
            rec[nrec].pos = 0xFFFFFFFFu;
            rec[nrec].st = 0;
        }
    if (o) {
        o->dc[0] = (int32_t)dc0, o->dc[1] = (int32_t)dc1, o->dc[2] = (int32_t)dc2, o->dc[3] = (int32_t)dc3;
    }
    s->pos = pos;
    s->nb = nb;
    s->blkn = (uint8_t)blkn;
    s->k = (uint8_t)k;
    s->err = (uint8_t)err;
    return found;
}

/* Two exits that give the next chunk the same entry (its own block count
 * does not depend on ours; with `same` tables neither does it on the block
 * of the MCU, which the settle sets from the count). */
JH_FN int jh_state_eq(const jh_scan_t *sc, const jh_state_t *a, const jh_state_t *b)
{
    return a->pos == b->pos && (sc->same || a->blkn == b->blkn) && a->k == b->k && a->err == b->err;
}

/* ------------------------------------------------------------ a batch */

/* One image of a batch: its scan, and where its tables, intervals, chunk
 * map and destuffed data are (byte offsets from the batch's base; the layout
 * of one image is patina__jpegh_stage's, 8-byte aligned). */
typedef struct jh_img {
    jh_scan_t sc;
    uint64_t tab;        /* (ntab) jh_table_t */
    uint64_t iv;         /* (niv) jh_iv_t */
    uint64_t civ;        /* (nc) u32: the interval of each of its chunks */
    uint64_t data;       /* destuffed bytes, 8 readable bytes after the last */
    uint64_t coef;       /* its first block in the batch's coefficients */
    uint32_t niv, nc;
    uint32_t c0;         /* its first chunk in the batch's */
    uint32_t iv0;        /* its first interval in the batch's (for the per-interval steps) */
    uint32_t flag;       /* index in the batch's flags */
    uint32_t nblocks;    /* its blocks (the GPU zeroes them first) */
} jh_img_t;

/* One restart interval (the whole scan when there are none). */
typedef struct jh_iv {
    uint32_t off, len;   /* its bytes: from the image's first data byte */
    uint32_t mcu0;       /* its first MCU */
    uint32_t blocks;     /* the blocks it codes */
    uint32_t c0, nc;     /* its chunks, image-relative */
} jh_iv_t;

/* A batch as both sides see it; chunk arrays indexed by the batch's chunk. */
typedef struct jh_batch {
    const uint8_t *base;          /* the images' staged regions */
    const jh_img_t *img;          /* (nimg) by c0 and iv0, both increasing */
    int16_t *coef;                /* (blocks, 64) s16, zero where the images' blocks go */
    uint32_t *flags;
    jh_state_t *st[2];            /* (nchunk) exits: init writes st[0], round r st[(r + 1) & 1] */
    jh_state_t *gx;               /* (nchunk) the exits of the guessed decodes (init) */
    jh_rec_t *rec;                /* (nchunk, JH_REC) their first boundaries */
    uint8_t *dirty[2];            /* (nchunk) the chunk must decode again (its predecessor's exit changed) */
    uint32_t *g0;                 /* (nchunk) its first block in its interval (after settle) */
    int32_t *dc;                  /* (nchunk, 4) running DC sums (write), then offsets (dc) */
    uint32_t *live;               /* (rounds + 1), zero on entry: live[r] != 0 when round r
                                   * has a chunk marked (init sets live[0], round r live[r + 1]) */
    uint32_t nimg, nchunk, niv;
} jh_batch_t;

/* The image of batch chunk i: the last whose c0 <= i; of batch interval j
 * (jh_find_img_iv): the last whose iv0 <= j. */
JH_FN uint32_t jh_find_img(const jh_batch_t *b, uint32_t i)
{
    uint32_t lo = 0, hi = b->nimg - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) >> 1;
        if (b->img[mid].c0 <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

JH_FN uint32_t jh_find_img_iv(const jh_batch_t *b, uint32_t j)
{
    uint32_t lo = 0, hi = b->nimg - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) >> 1;
        if (b->img[mid].iv0 <= j) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

#ifdef __CUDA_ARCH__
#define JH_FLAG(p, v) atomicOr((unsigned *)(p), (unsigned)(v))
#else
#define JH_FLAG(p, v) (*(p) |= (uint32_t)(v))
#endif

#define JH_TAB(b, im) ((const jh_table_t *)((b)->base + (im)->tab))
#define JH_IVS(b, im) ((const jh_iv_t *)((b)->base + (im)->iv))
#define JH_CIV(b, im) ((const uint32_t *)((b)->base + (im)->civ))
#define JH_DATA(b, im, v) ((b)->base + (im)->data + (v)->off)

/* Chunk c (image-relative) of interval v of an image with chunks of cb
 * bits: its first bit and where it stops. */
JH_FN void jh_chunk_bits(const jh_iv_t *v, uint32_t cb, uint32_t c, uint32_t *first, uint32_t *stop)
{
    uint32_t end = v->len * 8u;
    *first = (c - v->c0) * cb;
    *stop = *first + cb < end ? *first + cb : end;
}

/* 1. Chunk i from its guessed (or, first of its interval, exact) state. */
JH_FN void jh_step_init(const jh_batch_t *b, uint32_t i)
{
    const jh_img_t *im = b->img + jh_find_img(b, i);
    uint32_t c = i - im->c0;
    const jh_iv_t *v = JH_IVS(b, im) + JH_CIV(b, im)[c];
    jh_state_t s = {0, 0, 0, 0, 0, 0};
    uint32_t first, stop;
    jh_chunk_bits(v, im->sc.chunk_bits, c, &first, &stop);
    s.pos = first;
    (void)jh_decode(&im->sc, JH_TAB(b, im), JH_DATA(b, im, v), v->len * 8u, stop, 0xFFFFFFFFu, &s, 0,
                    b->rec + (uint64_t)i * JH_REC, 0, c != v->c0);
    b->st[0][i] = s;
    b->gx[i] = s;
    b->dirty[0][i] = c != v->c0;
    if (c != v->c0) b->live[0] = 1;
}

/* Chunk i of image im, interval v, decoded again from its predecessor's exit
 * `prev`: stops where it falls in step with the guessed decode (whose exit
 * it then takes, its blocks counted from here), else at the chunk's end. */
JH_FN jh_state_t jh_redo(const jh_batch_t *b, const jh_img_t *im, const jh_iv_t *v, uint32_t c, uint32_t i,
                         jh_state_t prev)
{
    uint32_t first, stop;
    jh_state_t s = prev;
    const jh_rec_t *rec = b->rec + (uint64_t)i * JH_REC;
    int m;
    jh_chunk_bits(v, im->sc.chunk_bits, c, &first, &stop);
    s.nb = 0;
    if (s.err) { /* the predecessor lost its way: this chunk keeps its guess of a start */
        s.pos = first;
        s.blkn = 0;
        s.k = 0;
    }
    s.err = 0;
    m = jh_decode(&im->sc, JH_TAB(b, im), JH_DATA(b, im, v), v->len * 8u, stop, 0xFFFFFFFFu, &s, 0, 0, rec, 0);
    if (m >= 0) { /* in step from here on: the guessed decode's exit, our block count */
        uint32_t nb = s.nb + (b->gx[i].nb - (rec[m].st & 0xFFFF));
        s = b->gx[i];
        s.nb = nb;
    }
    return s;
}

/* 2. One Jacobi round from st[r & 1] / dirty[r & 1] into the other pair.
 * A round after one that had no chunk marked does nothing: the pair it would
 * write is that round's input, which is final, and its flags are all clear
 * (the steps after the rounds read st[JH_ROUNDS & 1], whichever round wrote
 * it last). */
JH_FN void jh_step_round(const jh_batch_t *b, int r, uint32_t i)
{
    if (r > 0 && !b->live[r - 1]) return;
    const jh_state_t *in = b->st[r & 1];
    jh_state_t *out = b->st[(r + 1) & 1];
    const uint8_t *din = b->dirty[r & 1];
    uint8_t *dout = b->dirty[(r + 1) & 1];
    const jh_img_t *im = b->img + jh_find_img(b, i);
    uint32_t c = i - im->c0;
    const jh_iv_t *v = JH_IVS(b, im) + JH_CIV(b, im)[c];
    jh_state_t s = in[i];
    if (din[i]) s = jh_redo(b, im, v, c, i, in[i - 1]);
    out[i] = s;
    /* the next chunk must decode again when this exit changed; this one's own
     * flag is written by its predecessor's thread (or cleared: first of its interval) */
    if (c + 1 < v->c0 + v->nc) {
        int mark = din[i] && !jh_state_eq(&im->sc, &s, &in[i]);
        dout[i + 1] = (uint8_t)mark;
        if (mark) b->live[r + 1] = 1;
    }
    if (c == v->c0) dout[i] = 0;
}

/* 3. Interval v of image m, its chunks in order, from st[r & 1] (after r
 * rounds): decodes again the chunks still marked, then g0 of each. After
 * JH_SETTLE_MAX re-decodes it flags the image JH_E_SLOW and stops decoding
 * (the states and g0 of the rest are then wrong, and the image is the
 * CPU's: the write step writes none of its blocks, so its coefficients stay
 * zero whatever the order of the threads). */
JH_FN void jh_step_settle(const jh_batch_t *b, int r, uint32_t m, uint32_t v)
{
    const jh_img_t *im = b->img + m;
    const jh_iv_t *iv = JH_IVS(b, im) + v;
    jh_state_t *st = b->st[r & 1];
    uint8_t *dirty = b->dirty[r & 1];
    uint32_t g = 0, redone = 0;
    for (uint32_t c = iv->c0; c < iv->c0 + iv->nc; c++) {
        uint32_t i = im->c0 + c;
        if (c > iv->c0 && dirty[i] && redone++ == JH_SETTLE_MAX) JH_FLAG(b->flags + im->flag, JH_E_SLOW);
        if (c > iv->c0 && dirty[i] && redone <= JH_SETTLE_MAX) {
            jh_state_t s = jh_redo(b, im, iv, c, i, st[i - 1]);
            if (!jh_state_eq(&im->sc, &s, &st[i]) && c + 1 < iv->c0 + iv->nc) dirty[i + 1] = 1;
            st[i] = s;
        }
        dirty[i] = 0;
        b->g0[i] = g;
        g += st[i].nb;
        if (im->sc.same) st[i].blkn = (uint8_t)(g % (uint32_t)im->sc.nblk); /* the block its exit is in */
    }
}

/* 4. Chunk i from its exact entry: its blocks written, anomalies flagged.
 * `r` as for settle; zz: the JH_ZIGZAG table (the kernel's shared copy). */
JH_FN void jh_step_write(const jh_batch_t *b, int r, uint32_t i, const uint8_t *zz)
{
    const jh_state_t *st = b->st[r & 1];
    const jh_img_t *im = b->img + jh_find_img(b, i);
    uint32_t c = i - im->c0;
    const jh_iv_t *v = JH_IVS(b, im) + JH_CIV(b, im)[c];
    uint32_t first, stop, end = v->len * 8u, g0 = b->g0[i];
    int flag = 0;
    jh_state_t s = {0, 0, 0, 0, 0, 0};
    jh_out_t o;
    if (b->flags[im->flag] & JH_E_SLOW) { /* the CPU's: the settle stopped, states and g0 are not exact */
        for (int k = 0; k < 4; k++) b->dc[(uint64_t)i * 4 + k] = 0;
        return;
    }
    jh_chunk_bits(v, im->sc.chunk_bits, c, &first, &stop);
    o.coef = b->coef + im->coef * 64;
    o.mcu0 = v->mcu0;
    o.g0 = g0;
    o.dc[0] = o.dc[1] = o.dc[2] = o.dc[3] = 0;
    o.zz = zz;
    /* g0 >= blocks: the interval's last block was complete before this
     * chunk; the chunk that completed it checked what follows */
    if (g0 < v->blocks) {
        if (c != v->c0) {
            s = st[i - 1];
            s.nb = 0;
            flag = s.err; /* the decode of the interval failed before this chunk */
        }
        if (!flag) {
            (void)jh_decode(&im->sc, JH_TAB(b, im), JH_DATA(b, im, v), end, stop, v->blocks - g0, &s, &o, 0, 0, 0);
            flag = s.err;
            if (!flag && g0 + s.nb == v->blocks) {
                if (end - s.pos >= 8) flag = JH_E_LONG; /* whole bytes after the last block */
            } else if (!flag && c + 1 == v->c0 + v->nc) {
                flag = JH_E_SHORT;
            }
        }
        if (flag) JH_FLAG(b->flags + im->flag, flag);
    }
    for (int k = 0; k < 4; k++) b->dc[(uint64_t)i * 4 + k] = o.dc[k];
}

/* 5. Interval v of image m: each chunk's DC sums become the offsets before it. */
JH_FN void jh_step_dcscan(const jh_batch_t *b, uint32_t m, uint32_t v)
{
    const jh_img_t *im = b->img + m;
    const jh_iv_t *iv = JH_IVS(b, im) + v;
    uint32_t acc[4] = {0, 0, 0, 0};
    for (uint32_t c = iv->c0; c < iv->c0 + iv->nc; c++) {
        int32_t *d = b->dc + (uint64_t)(im->c0 + c) * 4;
        for (int k = 0; k < 4; k++) {
            uint32_t t = (uint32_t)d[k];
            d[k] = (int32_t)acc[k];
            acc[k] += t;
        }
    }
}

/* 6. Chunk i's blocks get its DC offsets (st as for write). Its blocks are
 * those whose DC codeword it decoded: from its entry (the next one when it
 * entered a block after its DC) to its exit (the one in progress there
 * included), within the interval. Lane `lane` of `lanes` takes every
 * lanes-th of them (the kernel: a warp per chunk). */
JH_FN void jh_step_dcfix_lane(const jh_batch_t *b, int r, uint32_t i, uint32_t lane, uint32_t lanes)
{
    const jh_state_t *st = b->st[r & 1];
    const jh_img_t *im = b->img + jh_find_img(b, i);
    uint32_t c = i - im->c0;
    const jh_iv_t *v = JH_IVS(b, im) + JH_CIV(b, im)[c];
    const int32_t *d = b->dc + (uint64_t)i * 4;
    uint32_t g0 = b->g0[i], g, gend;
    int16_t *coef = b->coef + im->coef * 64;
    if (d[0] == 0 && d[1] == 0 && d[2] == 0 && d[3] == 0) return; /* (a JH_E_SLOW image's are) */
    g = g0 + (c != v->c0 && st[i - 1].k != 0);
    gend = g0 + st[i].nb + (st[i].k != 0);
    if (gend > v->blocks) gend = v->blocks;
    for (g += lane; g < gend; g += lanes) {
        int64_t a = jh_block_at(&im->sc, v->mcu0, g);
        if (a >= 0) {
            int cc = im->sc.bcomp[g % (uint32_t)im->sc.nblk];
            coef[a * 64] = (int16_t)(uint16_t)((uint32_t)(uint16_t)coef[a * 64] + (uint32_t)d[cc]);
        }
    }
}

JH_FN void jh_step_dcfix(const jh_batch_t *b, int r, uint32_t i) { jh_step_dcfix_lane(b, r, i, 0, 1); }

/* Whether the settle of interval v of image m has a chunk to decode again
 * (one still marked after r rounds). When it has none, the settle is a
 * prefix sum of the chunks' block counts (and, with `same` tables, each
 * exit's block of the MCU from it), which the kernel does a warp at a
 * time; else one thread runs jh_step_settle. */
JH_FN int jh_settle_marked(const jh_batch_t *b, int r, uint32_t m, uint32_t v, uint32_t lane, uint32_t lanes)
{
    const jh_img_t *im = b->img + m;
    const jh_iv_t *iv = JH_IVS(b, im) + v;
    const uint8_t *dirty = b->dirty[r & 1];
    for (uint32_t c = iv->c0 + 1 + lane; c < iv->c0 + iv->nc; c += lanes)
        if (dirty[im->c0 + c]) return 1;
    return 0;
}

#endif
