/* The indexing pipeline: expand paths, then per window of files
 *   1. (parallel) read + SHA-256 + header probe,
 *   2. (main)     skip files stored with the same hash; cut the window at the
 *                 decoded-pixel budget,
 *   3. (parallel) decode; with the nvJPEG decoder a share of the JPEGs is
 *                 decoded on the GPU while the CPU workers decode the rest,
 *   4. extract the batch on the chosen device,
 *   5. (main)     store the batch in one transaction.
 * A file that fails is reported and counted; the run goes on. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <pthread.h>
#include <time.h>

#include "core/context.h"
#include "features/family.h"
#include "gpu/gpu.h"
#include "patina/pipeline.h"

int patina_jpeg_gpu_available(const patina_context_t *ctx, char *why, size_t size)
{
    return patina_gpu_jpeg_available(ctx ? patina__context_opts(ctx)->nvjpeg_library : NULL, why, size);
}

patina_status patina_jpeg_gpu_prepare(patina_context_t *ctx)
{
    patina_jpeg_gpu_t *d[2];
    return patina__context_jpeg(ctx, d);
}

patina_status patina_jpeg_decoder_parse(patina_jpeg_decoder *d, const char *name)
{
    if (name && !strcmp(name, "libjpeg")) *d = PATINA_JPEG_LIBJPEG;
    else if (name && !strcmp(name, "nvjpeg")) *d = PATINA_JPEG_NVJPEG;
    else return patina__fail(PATINA_E_INVALID, "unknown JPEG decoder '%s' (libjpeg or nvjpeg)",
                             name ? name : "(null)");
    return PATINA_OK;
}

/* ------------------------------------------------------------ path expansion */

typedef struct strvec {
    char **v;
    size_t n, cap;
} strvec_t;

static int strvec_push(strvec_t *s, char *p)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = p;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static patina_status walk_dir(strvec_t *out, const char *dir, int depth)
{
    DIR *d;
    struct dirent *e;
    strvec_t here = {0};
    size_t i;
    patina_status s = PATINA_OK;
    if (depth > 64) return patina__fail(PATINA_E_LIMIT, "index: directories nested deeper than 64 at '%s'", dir);
    d = opendir(dir);
    if (!d) return patina__fail(PATINA_E_IO, "index: cannot open directory '%s': %s", dir, strerror(errno));
    while ((e = readdir(d))) {
        char *p;
        if (e->d_name[0] == '.') continue;  /* hidden files, . and .. */
        if (asprintf(&p, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", e->d_name) < 0 ||
            strvec_push(&here, p) != 0) {
            s = patina__fail(PATINA_E_NOMEM, "index: out of memory listing '%s'", dir);
            break;
        }
    }
    closedir(d);
    if (here.n) qsort(here.v, here.n, sizeof *here.v, cmp_str);
    for (i = 0; i < here.n; i++) {
        struct stat st;
        if (s == PATINA_OK && stat(here.v[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            s = walk_dir(out, here.v[i], depth + 1);
            free(here.v[i]);
        } else if (s == PATINA_OK && stat(here.v[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (strvec_push(out, here.v[i]) != 0) {
                free(here.v[i]);
                s = patina__fail(PATINA_E_NOMEM, "index: out of memory");
            }
        } else {
            free(here.v[i]);    /* sockets, broken links, ... */
        }
    }
    free(here.v);
    return s;
}

patina_status patina_expand_paths(char ***files, size_t *n, const char *const *paths,
                                  size_t npaths, size_t *missing,
                                  void (*on_error)(void *, const char *, patina_status, const char *),
                                  void *user)
{
    strvec_t out = {0};
    size_t i;
    *files = NULL;
    *n = 0;
    if (missing) *missing = 0;
    for (i = 0; i < npaths; i++) {
        struct stat st;
        patina_status s = PATINA_OK;
        if (stat(paths[i], &st) != 0) {
            s = patina__fail(PATINA_E_IO, "cannot access '%s': %s", paths[i], strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            s = walk_dir(&out, paths[i], 0);
        } else {
            char *p = strdup(paths[i]);
            if (!p || strvec_push(&out, p) != 0) {
                free(p);
                s = patina__fail(PATINA_E_NOMEM, "index: out of memory");
            }
        }
        if (s != PATINA_OK) {
            if (s == PATINA_E_NOMEM) {
                size_t j;
                for (j = 0; j < out.n; j++) free(out.v[j]);
                free(out.v);
                return s;
            }
            if (missing) (*missing)++;
            if (on_error) on_error(user, paths[i], s, patina_last_error());
        }
    }
    *files = out.v;
    *n = out.n;
    return PATINA_OK;
}

/* ------------------------------------------------------------------ indexing */

typedef enum { SLOT_EMPTY, SLOT_READ, SLOT_SKIP, SLOT_FAILED, SLOT_DECODED } slot_state;

typedef struct slot {
    const char *path;          /* borrowed from files[] */
    slot_state state;
    void *data;                /* encoded bytes (malloc'd) until decoded */
    size_t size;
    uint8_t sha[32];
    int64_t mtime;
    patina_image_info_t info;
    patina_image_t img;
    int gpu;                   /* decoded (or being decoded) by nvJPEG */
    int have_old;              /* a record with this key exists */
    uint8_t old_sha[32];
    patina_status status;
    char error[512];
} slot_t;

typedef struct job {
    slot_t *slots;
    const patina_limits_t *limits;
} job_t;

static void slot_fail(slot_t *s, patina_status st)
{
    s->state = SLOT_FAILED;
    s->status = st;
    snprintf(s->error, sizeof s->error, "%s", patina_last_error());
    free(s->data);
    s->data = NULL;
}

/* Stage 1: read, hash, probe. Files stored with the same hash are skipped. */
static void read_one(void *arg, size_t i, int worker)
{
    job_t *j = arg;
    slot_t *s = &j->slots[i];
    struct stat st;
    patina_status r;
    (void)worker;
    r = patina_file_read(&s->data, &s->size, s->path, j->limits);
    if (r != PATINA_OK) {
        slot_fail(s, r);
        return;
    }
    s->mtime = stat(s->path, &st) == 0 ? (int64_t)st.st_mtime : 0;
    patina_sha256(s->sha, s->data, s->size);
    if (s->have_old && memcmp(s->sha, s->old_sha, 32) == 0) {
        s->state = SLOT_SKIP;
        free(s->data);
        s->data = NULL;
        return;
    }
    r = patina_image_probe(&s->info, s->data, s->size, s->path);
    if (r != PATINA_OK) {
        slot_fail(s, r);
        return;
    }
    s->state = SLOT_READ;
}

/* Stage 3: decode. */
static void decode_one(void *arg, size_t i, int worker)
{
    job_t *j = arg;
    slot_t *s = &j->slots[i];
    patina_status r;
    (void)worker;
    if (s->state != SLOT_READ || s->gpu) return;
    r = patina_image_decode(&s->img, s->data, s->size, j->limits, s->path);
    free(s->data);
    s->data = NULL;
    if (r != PATINA_OK) {
        slot_fail(s, r);
        return;
    }
    s->state = SLOT_DECODED;
}

static void slot_clear(slot_t *s)
{
    free(s->data);
    patina_image_release(&s->img);
    memset(s, 0, sizeof *s);
}

/* One window of files: stages 1-3 fill it (produce), stages 4-5 drain it
 * (consume). With the GPU device two windows alternate, so decoding the
 * next window on the CPU workers overlaps extraction and storage of this one. */
typedef struct window {
    slot_t *slots;            /* (capacity) */
    size_t first, take;       /* files[first .. first+take) */
    patina_jpeg_gpu_t *jdec;  /* nvJPEG decoder whose memory holds this window's images */
} window_t;

typedef struct producer {
    patina_pool_t *pool;
    patina_collection_t *c;
    const patina_extractor_t *ex;
    const patina_limits_t *limits;
    const char *const *files;
    size_t n, capacity, desc_bytes;
    uint64_t pixel_budget;
    unsigned char *probe;     /* desc_bytes scratch for the "already stored" check */
    double share;             /* nvJPEG's share of the JPEGs (adapted unless fixed) */
    int share_fixed;
    double t_read, t_decode;  /* stage times, collected into the stats by the consumer */
} producer_t;

/* ---- nvJPEG next to the CPU workers ---- */

typedef struct gpu_decode {
    patina_jpeg_gpu_t *d;
    slot_t **slots;
    size_t n;
    const void **data;
    size_t *size;
    patina_image_t *out;
    patina_status *st;
    patina_status result;
    double seconds;
} gpu_decode_t;

static void *gpu_decode_main(void *v)
{
    gpu_decode_t *g = v;
    double t0 = patina_now();
    g->result = patina_gpu_jpeg_decode(g->d, g->out, g->data, g->size, g->n, g->st);
    g->seconds = patina_now() - t0;
    return NULL;
}

/* A read JPEG nvJPEG may take: grey or YCbCr (CMYK stays on the CPU). */
static int gpu_candidate(const slot_t *s)
{
    return s->state == SLOT_READ && s->info.format == PATINA_FORMAT_JPEG &&
           (s->info.channels == 1 || s->info.channels == 3);
}

/* Stage 3 with nvJPEG: the first share of the window's JPEGs go to the GPU
 * (its own thread), the rest to the CPU workers at the same time; what the
 * GPU did not take is then decoded on the CPU. The share follows the rates
 * measured on each window, so both sides finish together. */
static void decode_split(producer_t *p, window_t *w, job_t *job)
{
    size_t i, ncand = 0, k, nc = 0, retry = 0;
    gpu_decode_t g = {0};
    pthread_t th;
    int started = 0;
    double t0, tcpu;
    for (i = 0; i < w->take; i++) {
        slot_t *s = &w->slots[i];
        if (gpu_candidate(s))
            ncand++;
    }
    k = (size_t)(p->share * (double)ncand + 0.5);
    if (k > ncand) k = ncand;
    /* Batch sizes in steps of 8: nvJPEG re-initialises its batch state
     * whenever the size changes. */
    if (k < ncand) k = k >= 8 ? k / 8 * 8 : (ncand >= 8 ? 8 : k);
    if (k) {
        g.slots = malloc(k * sizeof *g.slots);
        g.data = malloc(k * sizeof *g.data);
        g.size = malloc(k * sizeof *g.size);
        g.out = malloc(k * sizeof *g.out);
        g.st = malloc(k * sizeof *g.st);
        if (!g.slots || !g.data || !g.size || !g.out || !g.st) k = 0;
    }
    g.d = w->jdec;
    for (i = 0; i < w->take && g.n < k; i++) {
        slot_t *s = &w->slots[i];
        if (gpu_candidate(s)) {
            s->gpu = 1;
            g.slots[g.n] = s;
            g.data[g.n] = s->data;
            g.size[g.n] = s->size;
            g.n++;
        }
    }
    if (g.n) started = pthread_create(&th, NULL, gpu_decode_main, &g) == 0;
    if (g.n && !started) gpu_decode_main(&g);
    for (i = 0; i < w->take; i++) nc += w->slots[i].state == SLOT_READ && !w->slots[i].gpu;
    t0 = patina_now();
    patina_pool_run(p->pool, w->take, decode_one, job);
    tcpu = patina_now() - t0;
    if (started) pthread_join(th, NULL);
    for (i = 0; i < g.n; i++) {
        slot_t *s = g.slots[i];
        if (g.result == PATINA_OK && g.st[i] == PATINA_OK) {
            s->img = g.out[i];
            s->state = SLOT_DECODED;
            free(s->data);
            s->data = NULL;
        } else {
            s->gpu = 0;     /* the CPU decodes it (and names any problem) */
            retry++;
        }
    }
    if (retry) patina_pool_run(p->pool, w->take, decode_one, job);
    if (!p->share_fixed && g.n > retry && nc > 0 && g.seconds > 0 && tcpu > 0) {
        double rg = (double)(g.n - retry) / g.seconds, rc = (double)nc / tcpu;
        double want = rg / (rg + rc);
        p->share = 0.5 * p->share + 0.5 * want;
    } else if (!p->share_fixed && g.n && retry == g.n) {
        p->share *= 0.5;    /* the GPU took none: lean on the CPU */
    } else if (!p->share_fixed && nc == 0 && g.n) {
        p->share = p->share + 0.5 * (1.0 - p->share);  /* CPU idle: give the GPU more */
    }
    if (p->share < 0.02) p->share = 0.02;
    if (p->share > 1.0) p->share = 1.0;
    free(g.slots);
    free(g.data);
    free(g.size);
    free(g.out);
    free(g.st);
}

/* Stages 1-3 for the files from `first`: read + hash + probe, skip what is
 * stored, cut at the pixel budget, decode. Sets w->take (>= 1 when first < n). */
static void produce(producer_t *p, window_t *w, size_t first)
{
    size_t take = p->n - first < p->capacity ? p->n - first : p->capacity;
    size_t i, used = 0;
    uint64_t pixels = 0;
    job_t job = {w->slots, p->limits};
    double t0 = patina_now(), t1;
    w->first = first;
    for (i = 0; i < take; i++) {
        patina_record_t rec;
        slot_t *s = &w->slots[i];
        s->path = p->files[first + i];
        /* "Already indexed" = same key, and a descriptor in this table
         * (a second family over stored images is not skipped). */
        if (patina_collection_get_by_key(p->c, s->path, &rec) == PATINA_OK) {
            if (patina_collection_get_descriptor(p->c, patina_extractor_spec(p->ex), rec.id,
                                                 p->probe, p->desc_bytes) == PATINA_OK) {
                s->have_old = 1;
                memcpy(s->old_sha, rec.sha256, 32);
            }
            patina_record_release(&rec);
        }
    }
    patina_clear_error();
    patina_pool_run(p->pool, take, read_one, &job);
    /* Cut at the pixel budget (always keep at least one image); files past
     * the cut are read again by the next window. */
    for (i = 0; i < take; i++) {
        slot_t *s = &w->slots[i];
        if (s->state == SLOT_READ) {
            uint64_t px = (uint64_t)s->info.width * (uint64_t)s->info.height;
            if (used > 0 && pixels + px > p->pixel_budget) break;
            pixels += px;
            used++;
        }
    }
    for (size_t j = i; j < take; j++) slot_clear(&w->slots[j]);
    w->take = i;
    t1 = patina_now();
    p->t_read += t1 - t0;
    if (w->jdec) decode_split(p, w, &job);
    else patina_pool_run(p->pool, w->take, decode_one, &job);
    p->t_decode += patina_now() - t1;
}

typedef struct produce_arg {
    producer_t *p;
    window_t *w;
    size_t first;
} produce_arg_t;

static void *produce_main(void *v)
{
    produce_arg_t *a = v;
    produce(a->p, a->w, a->first);
    return NULL;
}

patina_status patina_index_files(patina_context_t *ctx, patina_collection_t *c,
                                 const patina_extractor_t *ex, const char *const *files,
                                 size_t n, const patina_index_opts_t *opts_in,
                                 patina_index_stats_t *stats)
{
    patina_index_opts_t opts = {0};
    const size_t desc_bytes = patina_extractor_bytes(ex);
    size_t window, i;
    window_t win[2] = {{0}};
    patina_image_t *imgs = NULL;
    patina_status *st = NULL;
    patina_insert_t *items = NULL;
    uint8_t *descs = NULL;
    size_t *map = NULL;
    patina_status result = PATINA_OK;
    double t0 = patina_now();
    patina_device dev;
    producer_t prod;
    patina_jpeg_gpu_t *jdec[2] = {NULL, NULL};
    int cur = 0, overlap;

    if (opts_in) opts = *opts_in;
    if (!opts.batch) opts.batch = 256;
    if (opts.batch > 65536) return patina__fail(PATINA_E_LIMIT, "index: batch %zu is larger than 65536", opts.batch);
    window = opts.batch;
    memset(stats, 0, sizeof *stats);
    stats->files = n;
    PATINA_TRY(patina_context_resolve(ctx, ex, opts.device, &dev));
    stats->device = dev;
    /* The CPU and hybrid devices use the worker pool to extract: decoding
     * cannot overlap there (the pool runs one job at a time). */
    overlap = dev == PATINA_DEVICE_GPU;

    memset(&prod, 0, sizeof prod);
    prod.pool = patina__context_workers_acquire(ctx); /* this run's turn; released at the end */
    prod.c = c;
    prod.ex = ex;
    prod.limits = patina_context_limits(ctx);
    prod.files = files;
    prod.n = n;
    prod.capacity = window;
    prod.desc_bytes = desc_bytes;
    prod.pixel_budget = opts.max_batch_pixels ? opts.max_batch_pixels
                                              : 256ull << 20; /* ~768 MB of RGB */
    prod.probe = malloc(desc_bytes ? desc_bytes : 1);
    prod.share_fixed = opts.nvjpeg_share >= 0;
    prod.share = opts.nvjpeg_share > 0 ? (opts.nvjpeg_share < 1 ? opts.nvjpeg_share : 1)
                 : opts.nvjpeg_share == 0 ? 1.0 : 0.7;
    if (opts.jpeg_decoder == PATINA_JPEG_NVJPEG) {
        if (dev != PATINA_DEVICE_GPU) {
            result = patina__fail(PATINA_E_INVALID, "index: the nvjpeg decoder needs --device gpu "
                                  "(it leaves the images in GPU memory); this run uses %s",
                                  patina_device_name(dev));
            goto done;
        }
        if (!patina__extractor_reads_device(ex)) {
            result = patina__fail(PATINA_E_INVALID, "index: family '%s' cannot read GPU-decoded "
                                  "images yet; use the libjpeg decoder", patina_extractor_family(ex));
            goto done;
        }
        if ((result = patina__context_jpeg(ctx, jdec)) != PATINA_OK) goto done;
    }

    win[0].slots = calloc(window, sizeof *win[0].slots);
    win[1].slots = overlap ? calloc(window, sizeof *win[1].slots) : NULL;
    imgs = calloc(window, sizeof *imgs);
    st = calloc(window, sizeof *st);
    items = calloc(window, sizeof *items);
    map = calloc(window, sizeof *map);
    descs = malloc(window * (desc_bytes ? desc_bytes : 1));
    if (!prod.probe || !win[0].slots || (overlap && !win[1].slots) || !imgs || !st || !items ||
        !map || !descs) {
        result = patina__fail(PATINA_E_NOMEM, "index: out of memory for a batch of %zu", window);
        goto done;
    }
    win[0].jdec = jdec[0];
    win[1].jdec = jdec[1];

    if (n) produce(&prod, &win[0], 0);
    while (win[cur].take > 0 && result == PATINA_OK) {
        window_t *w = &win[cur];
        size_t nb = 0, next = w->first + w->take;
        pthread_t th;
        double t_stage;
        produce_arg_t pa = {&prod, &win[1 - cur], next};
        int started = 0;

        win[1 - cur].take = 0;
        if (overlap && next < n) started = pthread_create(&th, NULL, produce_main, &pa) == 0;

        for (i = 0; i < w->take; i++) {
            slot_t *s = &w->slots[i];
            if (s->state == SLOT_SKIP) stats->skipped++;
            else if (s->state == SLOT_DECODED) {
                stats->gpu_decoded += s->gpu;
                map[nb] = i;
                imgs[nb++] = s->img;
                stats->bytes += s->size;
                stats->pixels += (uint64_t)s->img.width * (uint64_t)s->img.height;
            }
        }
        /* Stage 4: extract. */
        t_stage = patina_now();
        if (nb) result = patina_extract_batch(ctx, ex, dev, descs, imgs, nb, st);
        stats->t_extract += patina_now() - t_stage;
        t_stage = patina_now();
        /* Stage 5: one transaction. */
        if (result == PATINA_OK) {
            size_t ni = 0;
            for (i = 0; i < nb; i++) {
                slot_t *s = &w->slots[map[i]];
                if (st[i] != PATINA_OK) {
                    s->state = SLOT_FAILED;
                    s->status = st[i];
                    snprintf(s->error, sizeof s->error, "extract: %s failed for '%s'",
                             patina_extractor_family(ex), s->path);
                    continue;
                }
                items[ni].key = s->path;
                items[ni].size = s->size;
                memcpy(items[ni].sha256, s->sha, 32);
                items[ni].mtime = s->mtime;
                items[ni].width = s->img.width;
                items[ni].height = s->img.height;
                items[ni].desc = descs + i * desc_bytes;
                ni++;
            }
            if (ni) result = patina_collection_put(c, patina_extractor_spec(ex), desc_bytes, items, ni, NULL);
            if (result == PATINA_OK) stats->indexed += ni;
        }
        stats->t_store += patina_now() - t_stage;
        if (result == PATINA_OK)
            for (i = 0; i < w->take; i++) {
                slot_t *s = &w->slots[i];
                if (s->state == SLOT_FAILED) {
                    stats->failed++;
                    if (opts.on_error) opts.on_error(opts.user, s->path, s->status, s->error);
                }
            }
        for (i = 0; i < window; i++) slot_clear(&w->slots[i]);
        w->take = 0;
        if (started) {
            patina_status keep = result;
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", patina_last_error());
            t_stage = patina_now();
            pthread_join(th, NULL);     /* the producer only sets its own slots' messages */
            stats->t_wait += patina_now() - t_stage;
            if (keep != PATINA_OK) patina__fail(keep, "%s", msg);
            cur = 1 - cur;
        } else if (result == PATINA_OK && next < n) {
            produce(&prod, &win[cur], next);
        }
        stats->seconds = patina_now() - t0;
        stats->t_read = prod.t_read;
        stats->t_decode = prod.t_decode;
        if (result == PATINA_OK && opts.progress) opts.progress(opts.user, stats);
    }

done:
    patina__context_workers_release(ctx);
    for (int k = 0; k < 2; k++) {
        if (!win[k].slots) continue;
        for (i = 0; i < window; i++) slot_clear(&win[k].slots[i]);
        free(win[k].slots);
    }
    stats->seconds = patina_now() - t0;
    free(prod.probe);
    free(imgs);
    free(st);
    free(items);
    free(map);
    free(descs);
    return result;
}
