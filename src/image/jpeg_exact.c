/* Exact JPEG decoding, host side (jpeg_exact.h): libjpeg-turbo's own entropy
 * decoder (jpeg_read_coefficients) and the C reference of the arithmetic
 * after it (src/algo/jpeg_exact_core.h). What libjpeg would do differently
 * from the plain path of that arithmetic (warnings, block smoothing, unusual
 * sampling) is "not taken" and left to libjpeg-turbo. Not here: the GPU
 * kernels (src/gpu/jpeg_exact.cu), which compute what patina__jpegx_pixels
 * computes. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "algo/jpeg_exact_core.h"
#include "image/jpeg_exact.h"
#include "image/jpeg_huff.h"

#define JX_MAX_SCANS 500 /* TurboJPEG's TJFLAG_LIMITSCANS */

typedef struct jx_err {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int warned;                 /* libjpeg emitted a warning */
    int scans;                  /* more than JX_MAX_SCANS scans */
    char msg[JMSG_LENGTH_MAX];  /* the first error or warning */
} jx_err_t;

struct patina_jpegx_reader {
    struct jpeg_decompress_struct d;
    jx_err_t err;
    struct jpeg_progress_mgr progress;
    const char *name;
};

static void jx_error_exit(j_common_ptr c)
{
    jx_err_t *e = (jx_err_t *)c->err;
    if (!e->msg[0]) c->err->format_message(c, e->msg);
    longjmp(e->jump, 1);
}

/* level < 0: a warning (corrupt data); >= 0: trace messages, ignored. */
static void jx_emit_message(j_common_ptr c, int level)
{
    jx_err_t *e = (jx_err_t *)c->err;
    if (level >= 0) return;
    if (!e->warned && !e->msg[0]) c->err->format_message(c, e->msg);
    e->warned = 1;
}

static void jx_output_message(j_common_ptr c) { (void)c; }

static void jx_progress(j_common_ptr c)
{
    j_decompress_ptr d = (j_decompress_ptr)c;
    jx_err_t *e = (jx_err_t *)c->err;
    if (d->input_scan_number > JX_MAX_SCANS) {
        e->scans = 1;
        longjmp(e->jump, 1);
    }
}

static patina_status not_taken(const char *name, const char *why)
{
    return patina__fail(PATINA_E_FORMAT, "jpegx: '%s' not taken (%s)", name, why);
}

/* The libjpeg-turbo upsampling method of a component with ratios (rh, rv)
 * and dw samples per row (jdsample.c's choice, fancy upsampling on). */
static int up_method(int rh, int rv, int dw)
{
    if (rh == 1 && rv == 1) return JX_UP_COPY;
    if (rh == 2 && rv == 1) return dw > 2 ? JX_UP_H2V1 : JX_UP_REPL;
    if (rh == 1 && rv == 2) return JX_UP_H1V2;
    if (rh == 2 && rv == 2) return dw > 2 ? JX_UP_H2V2 : JX_UP_REPL;
    return JX_UP_REPL;
}

void patina__jpegx_close(patina_jpegx_reader_t *r)
{
    if (!r) return;
    jpeg_destroy_decompress(&r->d);
    free(r);
}

/* libjpeg's calls that may fail, each behind its own setjmp (so that no
 * local variable of the callers lives across a longjmp): 0, or -1 with the
 * reason in r->err. */
static int jx_header(patina_jpegx_reader_t *r, const void *data, size_t size)
{
    if (setjmp(r->err.jump)) return -1;
    jpeg_create_decompress(&r->d);
    r->progress.progress_monitor = jx_progress;
    r->d.progress = &r->progress;
    jpeg_mem_src(&r->d, (const unsigned char *)data, (unsigned long)size);
    return jpeg_read_header(&r->d, TRUE) == JPEG_HEADER_OK ? 0 : 1;
}

static jvirt_barray_ptr *jx_coefficients(patina_jpegx_reader_t *r)
{
    if (setjmp(r->err.jump)) return NULL;
    return jpeg_read_coefficients(&r->d);
}

/* Copies block row `row` of component c (bw blocks) to dst. */
static int jx_copy_row(patina_jpegx_reader_t *r, jvirt_barray_ptr a, int row, int16_t *dst, int bw)
{
    JBLOCKARRAY b;
    if (setjmp(r->err.jump)) return -1;
    b = r->d.mem->access_virt_barray((j_common_ptr)&r->d, a, (JDIMENSION)row, 1, FALSE);
    memcpy(dst, b[0], (size_t)bw * 64 * sizeof(int16_t));
    return 0;
}

static int jx_finish(patina_jpegx_reader_t *r)
{
    if (setjmp(r->err.jump)) return -1;
    jpeg_finish_decompress(&r->d);
    return 0;
}

static patina_status libjpeg_refused(patina_jpegx_reader_t *r)
{
    return patina__fail(PATINA_E_FORMAT, "jpegx: '%s' not taken (libjpeg: %s)", r->name,
                        r->err.scans ? "more than 500 scans" : r->err.msg);
}

patina_status patina__jpegx_open(patina_jpegx_reader_t **out, jx_image_t *im, const void *data, size_t size,
                                 const char *name)
{
    patina_jpegx_reader_t *r;
    const char *why = NULL;
    int c, maxh, maxv, h;
    uint64_t blocks = 0;
    patina_image_info_t info;
    *out = NULL;
    memset(im, 0, sizeof *im);
    if (!name) name = "<memory>";
    if (!data || size < 4 || size > (size_t)0xFFFFFFFFu) return not_taken(name, "size");
    /* What the CPU path's probe refuses (TurboJPEG's header reader: sampling
     * factors of no TurboJPEG class, precision, truncated headers) is left
     * to it, which then reports it as usual. */
    if (patina_image_probe(&info, data, size, name) != PATINA_OK || info.format != PATINA_FORMAT_JPEG) {
        patina_clear_error();
        return not_taken(name, "the CPU path's probe refuses it");
    }
    r = calloc(1, sizeof *r);
    if (!r) return patina__fail(PATINA_E_NOMEM, "jpegx: out of memory");
    r->name = name;
    r->d.err = jpeg_std_error(&r->err.pub);
    r->err.pub.error_exit = jx_error_exit;
    r->err.pub.emit_message = jx_emit_message;
    r->err.pub.output_message = jx_output_message;
    h = jx_header(r, data, size);
    if (h < 0) {
        patina_status s = libjpeg_refused(r);
        patina__jpegx_close(r);
        return s;
    }
    if (h > 0) why = "no image";
    else if (r->err.warned) why = "libjpeg warned";
    else if (r->d.data_precision != 8) why = "not 8-bit";
    else if (r->d.image_width == 0 || r->d.image_height == 0 || r->d.image_width > 65535 ||
             r->d.image_height > 65535)
        why = "size";
    else if (r->d.CCIR601_sampling) why = "CCIR601 sampling";
    if (!why) {
        int n = r->d.num_components;
        switch (r->d.jpeg_color_space) {
        case JCS_GRAYSCALE: im->cs = n == 1 ? JX_CS_GREY : 0; break;
        case JCS_YCbCr: im->cs = n == 3 ? JX_CS_YCC : 0; break;
        case JCS_RGB: im->cs = n == 3 ? JX_CS_RGB : 0; break;
        case JCS_CMYK: im->cs = n == 4 ? JX_CS_CMYK : 0; break;
        case JCS_YCCK: im->cs = n == 4 ? JX_CS_YCCK : 0; break;
        default: im->cs = 0; break;
        }
        if (!im->cs) why = "colour space";
    }
    if (why) {
        patina__jpegx_close(r);
        return not_taken(name, why);
    }
    im->width = (int32_t)r->d.image_width;
    im->height = (int32_t)r->d.image_height;
    im->ncomp = r->d.num_components;
    im->adobe = r->d.saw_Adobe_marker != 0;
    im->progressive = r->d.progressive_mode != 0;
    maxh = r->d.max_h_samp_factor;
    maxv = r->d.max_v_samp_factor;
    for (c = 0; c < im->ncomp; c++) {
        const jpeg_component_info *ci = &r->d.comp_info[c];
        jx_comp_t *k = &im->comp[c];
        if (ci->h_samp_factor < 1 || ci->v_samp_factor < 1 || maxh % ci->h_samp_factor ||
            maxv % ci->v_samp_factor) {
            patina__jpegx_close(r);
            return not_taken(name, "fractional sampling");
        }
        k->bw = (int32_t)ci->width_in_blocks;
        k->bh = (int32_t)ci->height_in_blocks;
        k->dw = (int32_t)ci->downsampled_width;
        k->dh = (int32_t)ci->downsampled_height;
        k->rh = maxh / ci->h_samp_factor;
        k->rv = maxv / ci->v_samp_factor;
        k->up = up_method(k->rh, k->rv, k->dw);
        k->first = blocks;
        blocks += (uint64_t)k->bw * (uint64_t)k->bh;
    }
    im->nblocks = blocks;
    *out = r;
    return PATINA_OK;
}

patina_status patina__jpegx_read(patina_jpegx_reader_t *r, jx_image_t *im, int16_t *coef)
{
    jvirt_barray_ptr *arrays = jx_coefficients(r);
    int c;
    if (!arrays) return r->err.msg[0] || r->err.scans ? libjpeg_refused(r) : not_taken(r->name, "no coefficients");
    if (r->err.warned) return not_taken(r->name, "libjpeg warned");
    /* Progressive files whose first coefficients are not all fully refined
     * are smoothed by libjpeg (jdcoefct.c's block smoothing): not taken. */
    if (r->d.progressive_mode) {
        if (!r->d.coef_bits) return not_taken(r->name, "no coefficient state");
        for (c = 0; c < im->ncomp; c++)
            for (int k = 0; k < 10; k++)
                if (r->d.coef_bits[c][k] != 0) return not_taken(r->name, "incomplete progression (smoothed)");
    }
    for (c = 0; c < im->ncomp; c++) {
        const jpeg_component_info *ci = &r->d.comp_info[c];
        jx_comp_t *k = &im->comp[c];
        int16_t *dst = coef + k->first * 64;
        if (!ci->quant_table) return not_taken(r->name, "component without a scan");
        for (int i = 0; i < 64; i++) k->q[i] = ci->quant_table->quantval[i];
        for (int row = 0; row < k->bh; row++)
            if (jx_copy_row(r, arrays[c], row, dst + (size_t)row * (size_t)k->bw * 64, k->bw) != 0)
                return libjpeg_refused(r);
    }
    if (jx_finish(r) != 0) return libjpeg_refused(r);
    if (r->err.warned) return not_taken(r->name, "libjpeg warned");
    return PATINA_OK;
}

int patina__jpegx_pixels(const jx_image_t *im, const int16_t *coef, uint8_t *rgb, size_t stride)
{
    uint8_t *plane[4] = {NULL, NULL, NULL, NULL};
    long pitch[4];
    int c, ok = 1;
    for (c = 0; c < im->ncomp && ok == 1; c++) {
        const jx_comp_t *k = &im->comp[c];
        pitch[c] = (long)k->bw * 8;
        plane[c] = malloc((size_t)pitch[c] * (size_t)k->bh * 8 + 1);
        if (!plane[c]) {
            ok = -1;
            break;
        }
        for (int by = 0; by < k->bh && ok == 1; by++)
            for (int bx = 0; bx < k->bw; bx++) {
                const int16_t *b = coef + (k->first + (uint64_t)by * (uint64_t)k->bw + (uint64_t)bx) * 64;
                if (!jx_idct(b, 1, k->q, plane[c] + (long)by * 8 * pitch[c] + bx * 8, (int)pitch[c])) {
                    ok = 0;
                    break;
                }
            }
    }
    if (ok == 1)
        for (int y = 0; y < im->height; y++) {
            uint8_t *d = rgb + (size_t)y * stride;
            for (int x = 0; x < im->width; x++) {
                int s[4] = {0, 0, 0, 0};
                for (c = 0; c < im->ncomp; c++) {
                    const jx_comp_t *k = &im->comp[c];
                    s[c] = jx_upsample(plane[c], pitch[c], k->dw, k->dh, k->up, k->rh, k->rv, x, y);
                }
                jx_pixel(im->cs, im->adobe, s, d + 3 * x);
            }
        }
    for (c = 0; c < 4; c++) free(plane[c]);
    return ok;
}

patina_status patina__jpegx_decode(patina_image_t *img, const void *data, size_t size, const char *name)
{
    patina_jpegx_reader_t *r;
    jx_image_t im;
    int16_t *coef;
    patina_status s;
    int ok;
    memset(img, 0, sizeof *img);
    if (!name) name = "<memory>";
    PATINA_TRY(patina__jpegx_open(&r, &im, data, size, name));
    coef = malloc((size_t)im.nblocks * 64 * sizeof *coef + 1);
    if (!coef) {
        patina__jpegx_close(r);
        return patina__fail(PATINA_E_NOMEM, "jpegx: out of memory for the coefficients of '%s'", name);
    }
    s = patina__jpegx_read(r, &im, coef);
    patina__jpegx_close(r);
    if (s == PATINA_OK) s = patina_image_init(img, im.width, im.height);
    if (s == PATINA_OK) {
        ok = patina__jpegx_pixels(&im, coef, img->data, img->stride);
        if (ok != 1) {
            patina_image_release(img);
            s = ok < 0 ? patina__fail(PATINA_E_NOMEM, "jpegx: out of memory decoding '%s'", name)
                       : not_taken(name, "coefficients outside the exact range");
        }
    }
    free(coef);
    return s;
}

/* The Huffman decoder's view of a file just opened (jpeg_huff.h): libjpeg
 * has read the header up to the first SOS, so its state has the tables, the
 * scan's components and where the entropy-coded data starts. */
static int jx_huff_table(jh_file_t *f, const JHUFF_TBL *t, int dc)
{
    uint8_t bits[17];
    int n = 0;
    if (!t || f->ntab >= JH_MAX_TABLES) return -1;
    for (int l = 0; l < 17; l++) bits[l] = t->bits[l];
    for (int l = 1; l <= 16; l++) n += bits[l];
    if (dc)
        for (int i = 0; i < n && i < 256; i++)
            if (t->huffval[i] > 15) return -1; /* libjpeg refuses DC tables with such symbols */
    if (jh_table_build(&f->tab[f->ntab], bits, t->huffval) != 0) return -1;
    return f->ntab++;
}

patina_status patina__jpegx_huff(patina_jpegx_reader_t *r, jx_image_t *im, jh_file_t *f)
{
    struct jpeg_decompress_struct *d = &r->d;
    jh_scan_t *sc = &f->sc;
    int ns = d->comps_in_scan, tdc[4] = {-1, -1, -1, -1}, tac[4] = {-1, -1, -1, -1}, seen = 0;
    uint64_t mcus;
    memset(sc, 0, sizeof *sc);
    sc->chunk_bits = JH_CHUNK_BITS; /* the caller may choose another before staging */
    f->ntab = 0;
    if (d->progressive_mode || d->arith_code) return not_taken(r->name, "not sequential Huffman");
    if (ns != d->num_components || ns < 1 || ns > 4) return not_taken(r->name, "more than one scan");
    if (d->Ss != 0 || d->Se != 63 || d->Ah != 0 || d->Al != 0) return not_taken(r->name, "scan parameters");
    if (!d->src || d->src->bytes_in_buffer < 2 || d->unread_marker != 0) return not_taken(r->name, "scan position");
    if (d->src->bytes_in_buffer > JH_MAX_SEGMENT) return not_taken(r->name, "scan larger than 256 MiB");
    sc->ncomp = (uint8_t)ns;
    for (int s = 0; s < ns; s++) {
        const jpeg_component_info *ci = d->cur_comp_info[s];
        int c = ci->component_index, h = ns == 1 ? 1 : ci->h_samp_factor, v = ns == 1 ? 1 : ci->v_samp_factor;
        const JQUANT_TBL *q = ci->quant_tbl_no >= 0 && ci->quant_tbl_no < NUM_QUANT_TBLS
                                  ? d->quant_tbl_ptrs[ci->quant_tbl_no] : NULL;
        if (c < 0 || c >= im->ncomp || !q || ci->dc_tbl_no < 0 || ci->dc_tbl_no > 3 || ci->ac_tbl_no < 0 ||
            ci->ac_tbl_no > 3)
            return not_taken(r->name, "tables");
        if (seen & (1 << c)) return not_taken(r->name, "a component twice in the scan");
        seen |= 1 << c;
        for (int i = 0; i < 64; i++) im->comp[c].q[i] = q->quantval[i];
        if (tdc[ci->dc_tbl_no] < 0) tdc[ci->dc_tbl_no] = jx_huff_table(f, d->dc_huff_tbl_ptrs[ci->dc_tbl_no], 1);
        if (tac[ci->ac_tbl_no] < 0) tac[ci->ac_tbl_no] = jx_huff_table(f, d->ac_huff_tbl_ptrs[ci->ac_tbl_no], 0);
        if (tdc[ci->dc_tbl_no] < 0 || tac[ci->ac_tbl_no] < 0) return not_taken(r->name, "Huffman tables");
        if (sc->nblk + h * v > JH_MAX_BLK) return not_taken(r->name, "MCU of more than 10 blocks");
        for (int y = 0; y < v; y++)
            for (int x = 0; x < h; x++) {
                int b = sc->nblk++;
                sc->bcomp[b] = (uint8_t)c;
                sc->bdc[b] = (uint8_t)tdc[ci->dc_tbl_no];
                sc->bac[b] = (uint8_t)tac[ci->ac_tbl_no];
                sc->bx[b] = (uint8_t)x;
                sc->by[b] = (uint8_t)y;
            }
        sc->cmw[c] = h;
        sc->cmh[c] = v;
        sc->cbw[c] = im->comp[c].bw;
        sc->cbh[c] = im->comp[c].bh;
        sc->cfirst[c] = (uint32_t)im->comp[c].first;
    }
    if (ns == 1) {
        sc->mcus_per_row = im->comp[sc->bcomp[0]].bw;
        sc->mcu_rows = im->comp[sc->bcomp[0]].bh;
    } else {
        sc->mcus_per_row = (int32_t)((d->image_width + 8u * (unsigned)d->max_h_samp_factor - 1) /
                                     (8u * (unsigned)d->max_h_samp_factor));
        sc->mcu_rows = (int32_t)((d->image_height + 8u * (unsigned)d->max_v_samp_factor - 1) /
                                 (8u * (unsigned)d->max_v_samp_factor));
    }
    if (im->nblocks > 0xFFFFFFFFu) return not_taken(r->name, "size");
    sc->same = 1; /* tables of the same contents in every block (jh_scan_t.same) */
    for (int b = 1; b < sc->nblk; b++)
        if (memcmp(&f->tab[sc->bdc[b]], &f->tab[sc->bdc[0]], sizeof f->tab[0]) != 0 ||
            memcmp(&f->tab[sc->bac[b]], &f->tab[sc->bac[0]], sizeof f->tab[0]) != 0)
            sc->same = 0;
    mcus = (uint64_t)sc->mcus_per_row * (uint64_t)sc->mcu_rows;
    sc->restart = (int32_t)d->restart_interval;
    f->niv = sc->restart ? (uint32_t)((mcus + (uint64_t)sc->restart - 1) / (uint64_t)sc->restart) : 1;
    f->seg = d->src->next_input_byte;
    f->seg_size = d->src->bytes_in_buffer;
    return PATINA_OK;
}
