/* CPU-only build: the GPU interface with no device behind it. Every entry
 * point reports PATINA_E_UNAVAILABLE, so `--device auto` falls back to the
 * CPU and `--device gpu` says why it cannot run. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "gpu/glcm.h"
#include "gpu/gpu.h"

static patina_status none(void)
{
    return patina__fail(PATINA_E_UNAVAILABLE, "gpu: this build has no CUDA support (nvcc was not found at build time)");
}

int patina_gpu__count(void) { return 0; }

patina_status patina_gpu__describe(int i, char *buf, size_t size)
{
    (void)i;
    if (size) buf[0] = '\0';
    return none();
}

patina_status patina_gpu_open(patina_gpu_t **g, int index, uint64_t budget)
{
    (void)index;
    (void)budget;
    *g = NULL;
    return none();
}

void patina_gpu_close(patina_gpu_t *g) { (void)g; }

void *patina_gpu_host_alloc(size_t bytes)
{
    (void)bytes;
    return NULL;
}

void patina_gpu_host_free(void *p) { (void)p; }

patina_status patina_gpu_cedd(patina_gpu_t *g, uint8_t *out, const patina_image_t *imgs, size_t n,
                              int compact, patina_status *st)
{
    (void)g; (void)out; (void)imgs; (void)n; (void)compact; (void)st;
    return none();
}

patina_status patina_gpu_cedd_hybrid(patina_gpu_t *g, patina_pool_t *pool, pgpu_cedd_rows_fn rows,
                                     uint8_t *out, const patina_image_t *imgs, size_t n, int compact,
                                     patina_status *st)
{
    (void)g; (void)pool; (void)rows; (void)out; (void)imgs; (void)n; (void)compact; (void)st;
    return none();
}

void *patina_gpu__dev_alloc(patina_gpu_t *g, size_t bytes)
{
    (void)g; (void)bytes;
    return NULL;
}

void patina_gpu__dev_free(patina_gpu_t *g, void *p) { (void)g; (void)p; }

int patina_gpu_image_on_device(const patina_image_t *img)
{
    (void)img;
    return 0;
}

patina_status patina_gpu_image_host(patina_image_t *host, const patina_image_t *img)
{
    *host = *img; /* without CUDA every image is in host memory */
    host->owned = 0;
    return PATINA_OK;
}

patina_status patina_gpu__upload(patina_gpu_t *g, void *dst, const void *src, size_t bytes)
{
    (void)g; (void)dst; (void)src; (void)bytes;
    return none();
}

patina_status patina_gpu__bandwidth(patina_gpu_t *g, int kind, size_t bytes, int reps,
                                    double *gbps)
{
    (void)g; (void)kind; (void)bytes; (void)reps;
    *gbps = 0.0;
    return none();
}

void patina_gpu__plan(const patina_gpu_t *g, char *buf, size_t size)
{
    (void)g;
    if (size) buf[0] = '\0';
}

patina_status patina_gpu__set_caps(patina_gpu_t *g, size_t pixel_bytes, size_t blocks, size_t units)
{
    (void)g; (void)pixel_bytes; (void)blocks; (void)units;
    return none();
}

patina_status patina_gpu_signature(patina_gpu_t *g, const patina_gpu_sig_conf_t *c, float *out,
                                   const patina_image_t *imgs, size_t n, patina_status *st)
{
    (void)g; (void)c; (void)out; (void)imgs; (void)n; (void)st;
    return none();
}

patina_status patina_gpu_lbp(patina_gpu_t *g, const patina_gpu_lbp_conf_t *c, uint32_t *counts,
                             const patina_image_t *imgs, size_t n, patina_status *st)
{
    (void)g; (void)c; (void)counts; (void)imgs; (void)n; (void)st;
    return none();
}

patina_status patina_gpu__lbp_grey(patina_gpu_t *g, const patina_gpu_lbp_conf_t *c, const uint8_t *grey,
                                   int w, int h, int n, void *codes, uint32_t *counts,
                                   patina_gpu_lbp_timing_t *timing)
{
    (void)g; (void)c; (void)grey; (void)w; (void)h; (void)n; (void)codes; (void)counts;
    if (timing) timing->ms_alone = timing->ms_stream = 0.0;
    return none();
}

patina_status patina_gpu__lbp_set_caps(patina_gpu_t *g, size_t rgb_bytes, size_t images, int narrow)
{
    (void)g; (void)rgb_bytes; (void)images; (void)narrow;
    return none();
}

/* ---- GLCM ---- */

patina_status patina_gpu_glcm_counts(patina_gpu_t *g, uint32_t *counts, const patina_gpu_grey_t *imgs,
                                     size_t n, int levels, const patina_glcm_offset_t *off,
                                     size_t noff, int symmetric)
{
    (void)g; (void)counts; (void)imgs; (void)n; (void)levels; (void)off; (void)noff; (void)symmetric;
    return none();
}

patina_status patina_gpu_glcm_features_of(patina_gpu_t *g, double *props, double *har,
                                          const uint32_t *counts, size_t nmat, int levels)
{
    (void)g; (void)props; (void)har; (void)counts; (void)nmat; (void)levels;
    return none();
}

patina_status patina_gpu_glcm_features(patina_gpu_t *g, double *props, double *har,
                                       const pgpu_glcm_src_t *src, int levels,
                                       const patina_glcm_offset_t *off, size_t noff, int symmetric,
                                       patina_status *st)
{
    (void)g; (void)props; (void)har; (void)src; (void)levels; (void)off; (void)noff; (void)symmetric;
    (void)st;
    return none();
}

patina_status pgpu_glcm_counts(patina_gpu_t *g, const pgpu_glcm_knobs_t *k, uint32_t *counts,
                               const patina_gpu_grey_t *imgs, size_t n, int levels,
                               const patina_glcm_offset_t *off, size_t noff, int symmetric)
{
    (void)g; (void)k; (void)counts; (void)imgs; (void)n; (void)levels; (void)off; (void)noff;
    (void)symmetric;
    return none();
}

patina_status pgpu_glcm_features(patina_gpu_t *g, const pgpu_glcm_knobs_t *k, double *props,
                                 double *har, const pgpu_glcm_src_t *src, int levels,
                                 const patina_glcm_offset_t *off, size_t noff, int symmetric,
                                 patina_status *st)
{
    (void)g; (void)k; (void)props; (void)har; (void)src; (void)levels; (void)off; (void)noff;
    (void)symmetric; (void)st;
    return none();
}

patina_status pgpu_glcm_time(patina_gpu_t *g, const pgpu_glcm_knobs_t *k, pgpu_glcm_timing_t *t,
                             uint32_t *counts, const patina_gpu_grey_t *imgs, size_t n, int levels,
                             const patina_glcm_offset_t *off, size_t noff, int symmetric)
{
    (void)g; (void)k; (void)t; (void)counts; (void)imgs; (void)n; (void)levels; (void)off; (void)noff;
    (void)symmetric;
    return none();
}

void patina_gpu__knn_one(int mode) { (void)mode; }
void patina_gpu__ix_kernel(int mode) { (void)mode; }

void patina_gpu__knn_prof(int on) { (void)on; }

void patina_gpu__knn_prof_last(pgpu_knn_prof_t *out)
{
    if (out) memset(out, 0, sizeof *out);
}

void patina_gpu__profile(patina_gpu_t *g, int on, double ms[4], uint64_t *batches)
{
    (void)g; (void)on;
    if (ms) ms[0] = ms[1] = ms[2] = ms[3] = 0.0;
    if (batches) *batches = 0;
}

int patina_gpu_jpeg_available(const char *library, char *why, size_t size)
{
    (void)library;
    if (why && size) snprintf(why, size, "this build has no CUDA support");
    return 0;
}

patina_status patina_gpu_jpeg_open(patina_jpeg_gpu_t **d, patina_gpu_t *g, const char *library,
                                   int lanes)
{
    (void)g;
    (void)library;
    (void)lanes;
    *d = NULL;
    return none();
}

void patina_gpu_jpeg_close(patina_jpeg_gpu_t *d) { (void)d; }

int patina_gpu_jpeg_lanes(const patina_jpeg_gpu_t *d)
{
    (void)d;
    return 0;
}

const char *patina_gpu_jpeg_backend(const patina_jpeg_gpu_t *d)
{
    (void)d;
    return "none";
}

patina_status patina_gpu_jpeg_decode(patina_jpeg_gpu_t *d, patina_image_t *out,
                                     const void *const *data, const size_t *size, size_t n,
                                     patina_status *st)
{
    (void)d; (void)out; (void)data; (void)size; (void)n; (void)st;
    return none();
}

patina_status patina_gpu_jpegx_open(patina_jpegx_gpu_t **d, patina_gpu_t *g)
{
    (void)g;
    *d = NULL;
    return none();
}

void patina_gpu_jpegx_close(patina_jpegx_gpu_t *d) { (void)d; }

patina_status patina_gpu_jpegx_decode(patina_jpegx_gpu_t *d, patina_pool_t *pool, patina_image_t *out,
                                      const void *const *data, const size_t *size, size_t n,
                                      patina_status *st)
{
    (void)d; (void)pool; (void)out; (void)data; (void)size; (void)n; (void)st;
    return none();
}

patina_status patina_gpu_jpegx_submit(patina_jpegx_gpu_t *d, patina_pool_t *pool, patina_image_t *out,
                                      const void *const *data, const size_t *size, size_t n,
                                      patina_status *st)
{
    (void)d; (void)pool; (void)out; (void)data; (void)size; (void)n; (void)st;
    return none();
}

patina_status patina_gpu_jpegx_finish(patina_jpegx_gpu_t *d, patina_image_t *out, size_t n, patina_status *st)
{
    (void)d; (void)out; (void)n; (void)st;
    return none();
}

patina_status patina_gpu__jpegh_decode(patina_gpu_t *g, const void *base, size_t bytes, const struct jh_img *img,
                                       uint32_t nimg, uint32_t nchunk, uint32_t niv, int16_t *coef, size_t blocks,
                                       uint32_t *flags, double *seconds)
{
    (void)g; (void)base; (void)bytes; (void)img; (void)nimg; (void)nchunk; (void)niv; (void)coef; (void)blocks;
    (void)flags; (void)seconds;
    return none();
}

void patina_gpu_jpegx_set_gpu_entropy(patina_jpegx_gpu_t *d, int on)
{
    (void)d;
    (void)on;
}

void patina_gpu_jpegx_set_huff_min_px(patina_jpegx_gpu_t *d, uint64_t px)
{
    (void)d;
    (void)px;
}

void patina_gpu_jpegx_set_chunk_bits(patina_jpegx_gpu_t *d, uint32_t bits)
{
    (void)d;
    (void)bits;
}

void patina_gpu_jpegx_times(const patina_jpegx_gpu_t *d, patina_jpegx_times_t *t)
{
    (void)d;
    if (t) memset(t, 0, sizeof *t);
}

patina_status patina_gpu_jpegx_pixels(patina_jpegx_gpu_t *d, patina_image_t *out, const struct jx_image *im,
                                      const int16_t *const *coef, size_t n, patina_status *st)
{
    (void)d; (void)out; (void)im; (void)coef; (void)n; (void)st;
    return none();
}

patina_status patina_gpu_knn_many(patina_gpu_t *g, const pgpu_knn_index_t *const *idx, size_t nt,
                                  const uint8_t *queries, size_t nq, size_t k, patina_hit_t *hits, size_t *counts,
                                  uint8_t *cpu, size_t *paths, int *taken)
{
    (void)g; (void)idx; (void)nt; (void)queries; (void)nq; (void)k; (void)hits; (void)counts; (void)cpu; (void)paths;
    if (taken) *taken = 0;
    return none();
}

patina_status patina_gpu_knn(patina_gpu_t *g, const pgpu_knn_index_t *idx, const uint8_t *queries,
                             const double *qv, size_t nq, const pgpu_req_t *rq, patina_hit_t *hits,
                             patina_hit_t **lists, size_t *counts, uint8_t *cpu, size_t *paths)
{
    (void)g; (void)idx; (void)queries; (void)qv; (void)nq; (void)rq; (void)hits; (void)lists; (void)counts;
    (void)cpu; (void)paths;
    return none();
}

size_t patina_gpu__knn_cached(patina_gpu_t *g)
{
    (void)g;
    return 0;
}

patina_status patina_gpu_identify(patina_gpu_t *g, const pgpu_idf_refs_t *refs, const uint8_t *queries,
                                  size_t qstride, const uint16_t *qcount, size_t nq, size_t n,
                                  const pgpu_idf_opts_t *o, uint64_t *keys, pgpu_idf_stats_t *stats)
{
    (void)g, (void)refs, (void)queries, (void)qstride, (void)qcount, (void)nq, (void)n, (void)o, (void)keys,
        (void)stats;
    return none();
}

patina_status patina_gpu_identify_pair(patina_gpu_t *g, const pgpu_idf_refs_t *refs, const uint8_t *queries,
                                       size_t qstride, const uint16_t *qcount, const uint16_t *qsplit, size_t nq,
                                       size_t n, const pgpu_idf_opts_t *o, uint64_t *keys, uint64_t *keys2,
                                       pgpu_idf_stats_t *stats)
{
    (void)g, (void)refs, (void)queries, (void)qstride, (void)qcount, (void)qsplit, (void)nq, (void)n, (void)o,
        (void)keys, (void)keys2, (void)stats;
    return none();
}

patina_status patina_gpu_identify_many(patina_gpu_t *g, const pgpu_idf_refs_t *refs, size_t nsets,
                                       const uint8_t *queries, size_t qstride, const uint16_t *qcount, size_t nq,
                                       size_t n, const pgpu_idf_opts_t *o, uint64_t *keys, pgpu_idf_stats_t *stats)
{
    (void)g, (void)refs, (void)nsets, (void)queries, (void)qstride, (void)qcount, (void)nq, (void)n, (void)o,
        (void)keys, (void)stats;
    return none();
}

patina_status patina_gpu_identify_nn(patina_gpu_t *g, const uint8_t *queries, size_t qstride, const uint16_t *qcount,
                                     size_t nq, size_t n, const uint32_t *pq, const uint8_t *const *rows,
                                     const uint16_t *nr, size_t np, size_t m, int32_t *out)
{
    (void)g, (void)queries, (void)qstride, (void)qcount, (void)nq, (void)n, (void)pq, (void)rows, (void)nr, (void)np,
        (void)m, (void)out;
    return none();
}

void patina_gpu__identify_capacity(const patina_gpu_t *g, size_t m, int precision, size_t *dev_slots)
{
    (void)g, (void)m, (void)precision;
    *dev_slots = 0;
}

void patina_gpu_identify_forget(patina_gpu_t *g, uint64_t serial)
{
    (void)g, (void)serial;
}

void patina_gpu__cached(patina_gpu_t *g, size_t *search, size_t *sqfd)
{
    (void)g;
    if (search) *search = 0;
    if (sqfd) *sqfd = 0;
}

void patina_gpu__identify_mirrors(patina_gpu_t *g, size_t *mirrors, uint64_t *builds)
{
    (void)g;
    if (mirrors) *mirrors = 0;
    if (builds) *builds = 0;
}

patina_status patina_gpu_sqfd(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, const float *queries,
                              const double *sqq, size_t nq, const pgpu_req_t *rq, uint32_t **cand,
                              size_t *ncand, uint8_t *cpu, pgpu_sqfd_stats_t *stats)
{
    (void)g; (void)idx; (void)queries; (void)sqq; (void)nq; (void)rq; (void)cand; (void)ncand;
    (void)cpu; (void)stats;
    return none();
}

patina_status patina_gpu_sqfd_pairs(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, const float *queries,
                                     const double *sqq, size_t nq, double *s, double *e)
{
    (void)g; (void)idx; (void)queries; (void)sqq; (void)nq; (void)s; (void)e;
    return none();
}

patina_status patina_gpu__sqfd_scan_ms(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, const float *queries,
                                       const double *sqq, size_t nq, int rows_per_thread, int reps, double *ms)
{
    (void)g; (void)idx; (void)queries; (void)sqq; (void)nq; (void)rows_per_thread; (void)reps;
    if (ms) *ms = 0.0;
    return none();
}

patina_status patina_gpu_sqfd_block_submit(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, int slot,
                                           const float *query, double sqq, const uint32_t *rows, size_t m)
{
    (void)g; (void)idx; (void)slot; (void)query; (void)sqq; (void)rows; (void)m;
    return none();
}

patina_status patina_gpu_sqfd_block_wait(patina_gpu_t *g, int slot, float *lo, float *hi)
{
    (void)g; (void)slot; (void)lo; (void)hi;
    return none();
}

patina_status patina_gpu_sqfd_filter(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, const float *queries,
                                     const double *sqq, size_t nq, const double *alo, const double *ahi,
                                     const double *eps, int ptolemaic, const pgpu_req_t *rq, uint32_t **cand,
                                     size_t *ncand, uint8_t *cpu, pgpu_sqfd_stats_t *stats)
{
    (void)g; (void)idx; (void)queries; (void)sqq; (void)nq; (void)alo; (void)ahi; (void)eps; (void)ptolemaic;
    (void)rq; (void)cand; (void)ncand; (void)cpu; (void)stats;
    return none();
}

patina_status patina_gpu_rootsift(patina_gpu_t *g, const patina_gpu_rootsift_conf_t *c, uint8_t *out,
                                  const patina_gpu_rootsift_item_t *items, size_t n, patina_status *st)
{
    (void)g; (void)c; (void)out; (void)items; (void)n; (void)st;
    return none();
}

void patina_gpu__rootsift_times(patina_gpu_t *g, double ms[PGPU_RS_STAGES], size_t *batches)
{
    (void)g;
    for (int k = 0; k < PGPU_RS_STAGES; k++) ms[k] = 0.0;
    if (batches) *batches = 0;
}

patina_status patina_gpu__rootsift_orientations(patina_gpu_t *g, int variant)
{
    (void)g; (void)variant;
    return none();
}

patina_status patina_gpu__rootsift_smoothing(patina_gpu_t *g, int variant)
{
    (void)g; (void)variant;
    return none();
}

patina_status patina_gpu__rootsift_octave(patina_gpu_t *g, const patina_gpu_rootsift_conf_t *c, const float *im,
                                          int w, int h, int octaves, int k, float *levels, float *dog)
{
    (void)g; (void)c; (void)im; (void)w; (void)h; (void)octaves; (void)k; (void)levels; (void)dog;
    return none();
}
