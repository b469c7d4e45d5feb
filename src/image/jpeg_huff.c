/* Huffman entropy decoding without libjpeg (jpeg_huff.h), host side: the
 * scan destuffed and cut at its restart markers, and the C reference of the
 * GPU's parallel decode (the steps of src/algo/jpeg_huff_core.h in loops, in
 * the order the kernels run them). Not here: which files are taken
 * (patina__jpegx_huff, in jpeg_exact.c: it reads libjpeg's header state) and
 * the kernels (src/gpu/jpeg_huff.cu). */
#include <stdlib.h>
#include <string.h>

#include "image/jpeg_huff.h"

#define JH_ALIGN(x) (((x) + 7) & ~(size_t)7)

static uint32_t chunk_bound(const jh_file_t *f)
{
    uint32_t cb = f->sc.chunk_bits >= JH_CHUNK_MIN ? f->sc.chunk_bits : JH_CHUNK_MIN;
    return (uint32_t)(f->seg_size * 8 / cb) + f->niv + 1;
}

size_t patina__jpegh_region_bound(const jh_file_t *f)
{
    return JH_ALIGN((size_t)f->ntab * sizeof(jh_table_t)) + JH_ALIGN((size_t)f->niv * sizeof(jh_iv_t)) +
           JH_ALIGN((size_t)chunk_bound(f) * sizeof(uint32_t)) + JH_ALIGN(f->seg_size + 8);
}

/* Closes interval `n` at out bytes: its MCUs, blocks and chunks. */
static const char *close_interval(const jh_file_t *f, jh_iv_t *iv, uint32_t n, size_t out, uint32_t *civ,
                                  uint32_t *nc, uint32_t cap)
{
    const jh_scan_t *sc = &f->sc;
    uint64_t mcus = (uint64_t)sc->mcus_per_row * (uint64_t)sc->mcu_rows;
    uint64_t r = sc->restart ? (uint64_t)sc->restart : mcus, m0 = (uint64_t)n * r;
    uint64_t cnt = mcus - m0 < r ? mcus - m0 : r;
    jh_iv_t *v = &iv[n];
    v->len = (uint32_t)(out - v->off);
    v->mcu0 = (uint32_t)m0;
    v->blocks = (uint32_t)(cnt * (uint64_t)sc->nblk);
    v->c0 = *nc;
    v->nc = (uint32_t)(((uint64_t)v->len * 8 + sc->chunk_bits - 1) / sc->chunk_bits);
    if (v->nc == 0) v->nc = 1;
    if (v->nc > cap - *nc) return "chunks"; /* cannot happen: chunk_bound */
    for (uint32_t c = 0; c < v->nc; c++) civ[*nc + c] = n;
    *nc += v->nc;
    return NULL;
}

/* The scan of f destuffed into data, its intervals into iv, each chunk's
 * interval into civ (at most cap). */
static const char *destuff(const jh_file_t *f, uint8_t *data, jh_iv_t *iv, uint32_t *civ, uint32_t cap,
                           size_t *nbytes, uint32_t *nchunks)
{
    const uint8_t *s = f->seg, *e = f->seg + f->seg_size;
    size_t out = 0;
    uint32_t n = 0, nc = 0;
    const char *why;
    iv[0].off = 0;
    for (;;) {
        const uint8_t *ff = memchr(s, 0xFF, (size_t)(e - s));
        const uint8_t *p;
        if (!ff) return "no marker after the scan";
        memcpy(data + out, s, (size_t)(ff - s));
        out += (size_t)(ff - s);
        for (p = ff + 1; p < e && *p == 0xFF; p++) /* fill bytes (libjpeg reads FF FF .. 00 as one FF) */
            ;
        if (p >= e) return "no marker after the scan";
        if (*p == 0) { /* a stuffed FF */
            data[out++] = 0xFF;
            s = p + 1;
            continue;
        }
        if (*p >= 0xD0 && *p <= 0xD7) { /* RSTn */
            if (!f->sc.restart) return "a restart marker without restart intervals";
            if (n + 1 >= f->niv) return "more restart markers than intervals";
            if (*p != 0xD0 + (n & 7)) return "restart markers out of order";
            if ((why = close_interval(f, iv, n, out, civ, &nc, cap)) != NULL) return why;
            n++;
            iv[n].off = (uint32_t)out;
            s = p + 1;
            continue;
        }
        if (*p != 0xD9) return "a marker other than the end of image after the scan";
        if (n + 1 != f->niv) return "fewer restart markers than intervals";
        if ((why = close_interval(f, iv, n, out, civ, &nc, cap)) != NULL) return why;
        break;
    }
    memset(data + out, 0, 8);
    *nbytes = out;
    *nchunks = nc;
    return NULL;
}

const char *patina__jpegh_stage(const jh_file_t *f, uint8_t *region, size_t cap, jh_img_t *im, size_t *used)
{
    size_t tab = 0, iv = tab + JH_ALIGN((size_t)f->ntab * sizeof(jh_table_t));
    size_t civ = iv + JH_ALIGN((size_t)f->niv * sizeof(jh_iv_t));
    size_t data = civ + JH_ALIGN((size_t)chunk_bound(f) * sizeof(uint32_t)), nbytes;
    uint32_t nc;
    const char *why;
    *used = 0;
    if (f->sc.chunk_bits < JH_CHUNK_MIN || f->sc.chunk_bits > JH_CHUNK_MAX || f->sc.chunk_bits % 8)
        return "chunk size";
    if (cap < patina__jpegh_region_bound(f)) return "staging too small";
    memcpy(region + tab, f->tab, (size_t)f->ntab * sizeof(jh_table_t));
    why = destuff(f, region + data, (jh_iv_t *)(void *)(region + iv), (uint32_t *)(void *)(region + civ),
                  chunk_bound(f), &nbytes, &nc);
    if (why) return why;
    memset(im, 0, sizeof *im);
    im->sc = f->sc;
    im->tab = tab;
    im->iv = iv;
    im->civ = civ;
    im->data = data;
    im->niv = f->niv;
    im->nc = nc;
    *used = data + JH_ALIGN(nbytes + 8);
    return NULL;
}

void patina__jpegh_steps(const jh_batch_t *b, int rounds, int rev)
{
    uint32_t n = b->nchunk, i, k;
#define JH_EACH(cnt) for (k = 0; k < (cnt) && ((i = rev ? (cnt)-1 - k : k), 1); k++)
    JH_EACH(n) jh_step_init(b, i);
    for (int r = 0; r < rounds; r++) JH_EACH(n) jh_step_round(b, r, i);
    JH_EACH(b->niv)
    {
        uint32_t m = jh_find_img_iv(b, i);
        jh_step_settle(b, rounds, m, i - b->img[m].iv0);
    }
    JH_EACH(n) jh_step_write(b, rounds, i, jh_zigzag_host);
    JH_EACH(b->niv)
    {
        uint32_t m = jh_find_img_iv(b, i);
        jh_step_dcscan(b, m, i - b->img[m].iv0);
    }
    JH_EACH(n) jh_step_dcfix(b, rounds, i);
#undef JH_EACH
}

int patina__jpegh_run(const uint8_t *base, const jh_img_t *img, uint32_t nimg, uint32_t nchunk, uint32_t niv,
                      int rounds, int rev, int16_t *coef, uint32_t *flags)
{
    jh_batch_t b;
    jh_state_t *st = malloc(2 * (size_t)nchunk * sizeof *st + 1);
    uint8_t *dirty = malloc(2 * (size_t)nchunk + 1);
    uint32_t *g0 = malloc((size_t)nchunk * sizeof *g0 + 1);
    int32_t *dc = malloc((size_t)nchunk * 4 * sizeof *dc + 1);
    jh_state_t *gx = malloc((size_t)nchunk * sizeof *gx + 1);
    jh_rec_t *rec = malloc((size_t)nchunk * JH_REC * sizeof *rec + 1);
    uint32_t *live = calloc((size_t)(rounds > 0 ? rounds : 0) + 1, sizeof *live); /* live[0..rounds] */
    int ret = -1;
    if (st && dirty && g0 && dc && gx && rec && live) {
        memset(&b, 0, sizeof b);
        b.base = base;
        b.img = img;
        b.coef = coef;
        b.flags = flags;
        b.st[0] = st;
        b.st[1] = st + nchunk;
        b.dirty[0] = dirty;
        b.dirty[1] = dirty + nchunk;
        b.g0 = g0;
        b.dc = dc;
        b.gx = gx;
        b.rec = rec;
        b.live = live;
        b.nimg = nimg;
        b.nchunk = nchunk;
        b.niv = niv;
        patina__jpegh_steps(&b, rounds, rev);
        ret = 0;
    }
    free(st);
    free(dirty);
    free(g0);
    free(dc);
    free(gx);
    free(rec);
    free(live);
    return ret;
}

int patina__jpegh_decode(const uint8_t *region, const jh_img_t *im, int16_t *coef)
{
    jh_img_t img = *im;
    uint32_t flags = 0;
    img.c0 = 0;
    img.iv0 = 0;
    img.flag = 0;
    img.coef = 0;
    if (patina__jpegh_run(region, &img, 1, im->nc, im->niv, JH_ROUNDS, 0, coef, &flags) != 0) return -1;
    return (int)flags;
}

patina_status patina__jpegh_read(patina_jpegx_reader_t *r, jx_image_t *im, int16_t *coef, const char *name,
                                 uint32_t chunk_bits)
{
    jh_file_t *f = malloc(sizeof *f);
    uint8_t *region = NULL;
    jh_img_t img;
    size_t used;
    const char *why;
    patina_status s;
    int fl;
    if (!name) name = "<memory>";
    if (!f) return patina__fail(PATINA_E_NOMEM, "jpegh: out of memory");
    s = patina__jpegx_huff(r, im, f);
    if (s != PATINA_OK) goto done;
    if (chunk_bits) f->sc.chunk_bits = chunk_bits;
    region = malloc(patina__jpegh_region_bound(f));
    if (!region) {
        s = patina__fail(PATINA_E_NOMEM, "jpegh: out of memory for '%s'", name);
        goto done;
    }
    why = patina__jpegh_stage(f, region, patina__jpegh_region_bound(f), &img, &used);
    if (why) {
        s = patina__fail(PATINA_E_FORMAT, "jpegh: '%s' not taken (%s)", name, why);
        goto done;
    }
    memset(coef, 0, (size_t)im->nblocks * 64 * sizeof *coef);
    fl = patina__jpegh_decode(region, &img, coef);
    if (fl < 0) s = patina__fail(PATINA_E_NOMEM, "jpegh: out of memory decoding '%s'", name);
    else if (fl) s = patina__fail(PATINA_E_FORMAT, "jpegh: '%s' flagged (0x%x)", name, (unsigned)fl);
done:
    free(f);
    free(region);
    return s;
}
