/* Huffman entropy decoding without libjpeg (jpeg_huff.h), host side: the
 * scan destuffed and cut at its restart markers, and the C reference of the
 * GPU's parallel decode (the steps of src/algo/jpeg_huff_core.h in loops, in
 * the order the kernels run them). Not here: which files are taken
 * (patina__jpegx_huff, in jpeg_exact.c: it reads libjpeg's header state) and
 * the kernels (src/gpu/jpeg_huff.cu). */
#include <stdlib.h>
#include <string.h>

#include "image/jpeg_huff.h"

size_t patina__jpegh_data_bound(const jh_file_t *f) { return f->seg_size + 8; }

uint32_t patina__jpegh_chunk_bound(const jh_file_t *f)
{
    return (uint32_t)(f->seg_size * 8 / JH_CHUNK_BITS) + f->niv + 1;
}

/* Closes interval `n` at out bytes: its MCUs, blocks and chunks. */
static void close_interval(const jh_file_t *f, jh_iv_t *iv, uint32_t n, size_t out, uint32_t *civ, uint32_t *nc)
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
    v->nc = (uint32_t)(((uint64_t)v->len * 8 + JH_CHUNK_BITS - 1) / JH_CHUNK_BITS);
    if (v->nc == 0) v->nc = 1;
    for (uint32_t c = 0; c < v->nc; c++) civ[*nc + c] = n;
    *nc += v->nc;
}

const char *patina__jpegh_destuff(const jh_file_t *f, uint8_t *data, jh_iv_t *iv, uint32_t *civ, size_t *nbytes,
                                  uint32_t *nchunks)
{
    const uint8_t *s = f->seg, *e = f->seg + f->seg_size;
    size_t out = 0;
    uint32_t n = 0, nc = 0;
    *nbytes = 0;
    *nchunks = 0;
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
            close_interval(f, iv, n, out, civ, &nc);
            n++;
            iv[n].off = (uint32_t)out;
            s = p + 1;
            continue;
        }
        if (*p != 0xD9) return "a marker other than the end of image after the scan";
        if (n + 1 != f->niv) return "fewer restart markers than intervals";
        close_interval(f, iv, n, out, civ, &nc);
        break;
    }
    memset(data + out, 0, 8);
    *nbytes = out;
    *nchunks = nc;
    return NULL;
}

int patina__jpegh_decode(const jh_file_t *f, const uint8_t *data, const jh_iv_t *iv, const uint32_t *civ,
                         uint32_t nchunks, int16_t *coef)
{
    jh_batch_t b;
    jh_img_t img;
    uint32_t flags = 0;
    jh_state_t *st = malloc(2 * (size_t)nchunks * sizeof *st + 1);
    uint8_t *dirty = malloc(2 * (size_t)nchunks + 1);
    uint32_t *g0 = malloc((size_t)nchunks * sizeof *g0 + 1);
    int32_t *dc = malloc((size_t)nchunks * 4 * sizeof *dc + 1);
    int ret = -1;
    if (!st || !dirty || !g0 || !dc) goto done;
    memset(&img, 0, sizeof img);
    img.sc = f->sc;
    img.niv = f->niv;
    img.nc = nchunks;
    memset(&b, 0, sizeof b);
    b.data = data;
    b.tab = f->tab;
    b.img = &img;
    b.iv = iv;
    b.civ = civ;
    b.coef = coef;
    b.flags = &flags;
    b.st[0] = st;
    b.st[1] = st + nchunks;
    b.dirty[0] = dirty;
    b.dirty[1] = dirty + nchunks;
    b.g0 = g0;
    b.dc = dc;
    b.nimg = 1;
    b.nchunk = nchunks;
    /* the kernels' order: every step over all chunks (intervals) before the next */
    for (uint32_t i = 0; i < nchunks; i++) jh_step_init(&b, i);
    for (int r = 0; r < JH_ROUNDS; r++)
        for (uint32_t i = 0; i < nchunks; i++) jh_step_round(&b, r, i);
    for (uint32_t v = 0; v < f->niv; v++) jh_step_settle(&b, JH_ROUNDS, 0, v);
    for (uint32_t i = 0; i < nchunks; i++) jh_step_write(&b, JH_ROUNDS, i);
    for (uint32_t v = 0; v < f->niv; v++) jh_step_dcscan(&b, 0, v);
    for (uint32_t i = 0; i < nchunks; i++) jh_step_dcfix(&b, JH_ROUNDS, i);
    ret = (int)flags;
done:
    free(st);
    free(dirty);
    free(g0);
    free(dc);
    return ret;
}

patina_status patina__jpegh_read(patina_jpegx_reader_t *r, jx_image_t *im, int16_t *coef, const char *name)
{
    jh_file_t *f = malloc(sizeof *f);
    uint8_t *data = NULL;
    jh_iv_t *iv = NULL;
    uint32_t *civ = NULL, nc;
    size_t nbytes;
    const char *why;
    patina_status s;
    int fl;
    if (!name) name = "<memory>";
    if (!f) return patina__fail(PATINA_E_NOMEM, "jpegh: out of memory");
    s = patina__jpegx_huff(r, im, f);
    if (s != PATINA_OK) goto done;
    data = malloc(patina__jpegh_data_bound(f));
    iv = malloc((size_t)f->niv * sizeof *iv);
    civ = malloc((size_t)patina__jpegh_chunk_bound(f) * sizeof *civ);
    if (!data || !iv || !civ) {
        s = patina__fail(PATINA_E_NOMEM, "jpegh: out of memory for '%s'", name);
        goto done;
    }
    why = patina__jpegh_destuff(f, data, iv, civ, &nbytes, &nc);
    if (why) {
        s = patina__fail(PATINA_E_FORMAT, "jpegh: '%s' not taken (%s)", name, why);
        goto done;
    }
    memset(coef, 0, (size_t)im->nblocks * 64 * sizeof *coef);
    fl = patina__jpegh_decode(f, data, iv, civ, nc, coef);
    if (fl < 0) s = patina__fail(PATINA_E_NOMEM, "jpegh: out of memory decoding '%s'", name);
    else if (fl) s = patina__fail(PATINA_E_FORMAT, "jpegh: '%s' flagged (0x%x)", name, (unsigned)fl);
done:
    free(f);
    free(data);
    free(iv);
    free(civ);
    return s;
}
