/* The indexing pipeline: expand paths, then per window of files
 *   0. (main)     cut the window where the files' sizes pass the memory budget,
 *   1. (parallel) read + SHA-256 + header probe + pixel limit,
 *   2. (main)     skip files stored with the same hash; cut the window where
 *                 encoded + decoded bytes pass the memory budget,
 *   3. (parallel) decode; with the exact GPU decoder the workers
 *                 entropy-decode the JPEGs and the GPU finishes them (the
 *                 others, and those it does not take, are decoded on the
 *                 CPU next); with nvJPEG a share of the JPEGs is decoded on
 *                 the GPU while the CPU workers decode the rest,
 *   4. extract the batch on the chosen device,
 *   5. (main)     store the batch in one transaction, then report the
 *                 window's failures and decoder warnings in file order.
 * A file that fails is reported and counted; the run goes on.
 * patina_load_files runs stages 0-3 alone (no hashing, no store) for other
 * front ends. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "core/context.h"
#include "features/family.h"
#include "gpu/gpu.h"
#include "image/loaders.h"
#include "image/video.h"
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
    else if (name && !strcmp(name, "exact-gpu")) *d = PATINA_JPEG_EXACT_GPU;
    else if (name && !strcmp(name, "auto")) *d = PATINA_JPEG_AUTO;
    else return patina__fail(PATINA_E_INVALID, "unknown JPEG decoder '%s' (libjpeg, nvjpeg, exact-gpu or auto)",
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

static void strvec_free(strvec_t *s)
{
    size_t i;
    for (i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A set of (device, inode) pairs: open addressing, linear probing, kept at
 * most half full. */
typedef struct devino {
    dev_t dev;
    ino_t ino;
    int used;
} devino_t;

typedef struct idset {
    devino_t *v;   /* (cap) slots, cap a power of two */
    size_t n, cap;
} idset_t;

static size_t idset_hash(dev_t dev, ino_t ino)
{
    uint64_t h = (uint64_t)ino * 0x9E3779B97F4A7C15ull ^ (uint64_t)dev * 0xC2B2AE3D27D4EB4Full;
    return (size_t)(h ^ (h >> 29));
}

/* 1 when (dev, ino) was added, 0 when it was there already, -1 out of memory. */
static int idset_add(idset_t *s, dev_t dev, ino_t ino)
{
    size_t i;
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024, k;
        devino_t *v = calloc(cap, sizeof *v);
        if (!v) return -1;
        for (k = 0; k < s->cap; k++) {
            if (!s->v[k].used) continue;
            for (i = idset_hash(s->v[k].dev, s->v[k].ino) & (cap - 1); v[i].used; i = (i + 1) & (cap - 1)) {}
            v[i] = s->v[k];
        }
        free(s->v);
        s->v = v;
        s->cap = cap;
    }
    for (i = idset_hash(dev, ino) & (s->cap - 1); s->v[i].used; i = (i + 1) & (s->cap - 1))
        if (s->v[i].dev == dev && s->v[i].ino == ino) return 0;
    s->v[i].dev = dev;
    s->v[i].ino = ino;
    s->v[i].used = 1;
    s->n++;
    return 1;
}

typedef struct walk {
    strvec_t out;        /* files found, in walk order */
    idset_t dirs, files; /* visited directories, listed files */
    size_t skipped, others;
    const patina_walk_opts_t *o;
    size_t base;         /* bytes of the walked operand's prefix ("dir/") in entries' paths */
} walk_t;

#define WALK_MAX_DEPTH 256

/* Reports a path the walk skips (the message is set here, once) and counts it. */
static void walk_skip(walk_t *w, const char *path, patina_status s, const char *fmt, ...)
    PATINA_PRINTF(4, 5);

static void walk_skip(walk_t *w, const char *path, patina_status s, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    patina__fail(s, "%s", msg);
    w->skipped++;
    if (w->o->on_error) w->o->on_error(w->o->user, path, s, msg);
}

/* 1 when `rel` (the path below the walked folder) or its base name matches
 * one of the n patterns (fnmatch, case-insensitive, '*' also matches '/'). */
static int matches(const char *const *pat, size_t n, const char *rel)
{
    const char *base = strrchr(rel, '/');
    size_t i;
    base = base ? base + 1 : rel;
    for (i = 0; i < n; i++)
        if (fnmatch(pat[i], rel, FNM_CASEFOLD) == 0 || fnmatch(pat[i], base, FNM_CASEFOLD) == 0) return 1;
    return 0;
}

/* 1 when an image loader recognises the file's first bytes, or, in a build
 * that reads video, they are a video container's; or the file cannot be
 * read (the indexing then says why). */
static int looks_like_image(const char *path)
{
    unsigned char head[512];
    ssize_t got;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return 1;
    got = read(fd, head, sizeof head);
    close(fd);
    if (got < 0) return 1;
    return patina_format_sniff(head, (size_t)got) != PATINA_FORMAT_UNKNOWN ||
           (patina_video_available() && patina_video_sniff(head, (size_t)got));
}

/* Whether the folder walk takes file p (its inode not yet looked at): the
 * patterns, then the loaders. A file left out is counted and reported. */
static int walk_takes(walk_t *w, const char *p)
{
    const patina_walk_opts_t *o = w->o;
    const char *rel = strlen(p) > w->base ? p + w->base : p, *why = NULL;
    char msg[1024];
    if (o->nexclude && matches(o->exclude, o->nexclude, rel)) why = "it matches an exclude pattern";
    else if (o->ninclude && !matches(o->include, o->ninclude, rel)) why = "it matches no include pattern";
    else if (!o->all_files && !looks_like_image(p))
        why = patina_video_available() ? "no image loader recognises its first bytes, nor the video reader"
                                       : "no image loader recognises its first bytes";
    if (!why) return 1;
    w->others++;
    if (o->on_other) {
        snprintf(msg, sizeof msg, "index: '%s' left out: %s", p, why);
        o->on_other(o->user, p, PATINA_OK, msg);
    }
    return 0;
}

static patina_status nomem(void) { return patina__fail(PATINA_E_NOMEM, "index: out of memory listing files"); }

/* Adds a regular file unless its inode is listed already; takes p. */
static patina_status walk_file(walk_t *w, char *p, const struct stat *st)
{
    int r = idset_add(&w->files, st->st_dev, st->st_ino);
    if (r <= 0) {
        free(p);
        return r < 0 ? nomem() : PATINA_OK;
    }
    if (strvec_push(&w->out, p) != 0) {
        free(p);
        return nomem();
    }
    return PATINA_OK;
}

/* Walks directory `dir` (already marked visited). Only running out of
 * memory stops the walk; every other problem skips one path. */
static patina_status walk_dir(walk_t *w, const char *dir, int depth)
{
    DIR *d;
    struct dirent *e;
    strvec_t here = {0};
    size_t i;
    patina_status s = PATINA_OK;
    const char *sep = dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/";
    if (depth > WALK_MAX_DEPTH) {
        walk_skip(w, dir, PATINA_E_LIMIT, "index: '%s' is nested deeper than %d directories; skipped", dir,
                  WALK_MAX_DEPTH);
        return PATINA_OK;
    }
    d = opendir(dir);
    if (!d) {
        walk_skip(w, dir, PATINA_E_IO, "index: cannot open directory '%s': %s; skipped", dir, strerror(errno));
        return PATINA_OK;
    }
    for (;;) {
        char *p;
        errno = 0;
        e = readdir(d);
        if (!e) {
            if (errno)
                walk_skip(w, dir, PATINA_E_IO, "index: cannot read directory '%s': %s; the rest of it is skipped",
                          dir, strerror(errno));
            break;
        }
        if (e->d_name[0] == '.') continue; /* hidden entries, . and .. */
        if (asprintf(&p, "%s%s%s", dir, sep, e->d_name) < 0) {
            s = nomem();
            break;
        }
        if (strvec_push(&here, p) != 0) {
            free(p);
            s = nomem();
            break;
        }
    }
    closedir(d);
    if (here.n) qsort(here.v, here.n, sizeof *here.v, cmp_str);
    for (i = 0; i < here.n && s == PATINA_OK; i++) {
        char *p = here.v[i];
        struct stat st, lst;
        here.v[i] = NULL;
        if (stat(p, &st) != 0) {
            int err = errno;
            if (err == ENOENT && lstat(p, &lst) == 0 && S_ISLNK(lst.st_mode))
                walk_skip(w, p, PATINA_E_IO, "index: broken symbolic link '%s'; skipped", p);
            else
                walk_skip(w, p, PATINA_E_IO, "index: cannot examine '%s': %s; skipped", p, strerror(err));
            free(p);
        } else if (S_ISDIR(st.st_mode)) {
            const char *rel = strlen(p) > w->base ? p + w->base : p;
            int r = w->o->nexclude && matches(w->o->exclude, w->o->nexclude, rel) ? 0 /* pruned */
                                                                                  : idset_add(&w->dirs, st.st_dev, st.st_ino);
            if (r < 0) s = nomem();
            else if (r > 0) s = walk_dir(w, p, depth + 1); /* else visited: a link back, or twice */
            free(p);
        } else if (S_ISREG(st.st_mode)) {
            if (walk_takes(w, p)) s = walk_file(w, p, &st);
            else free(p);
        } else {
            free(p); /* sockets, FIFOs, devices */
        }
    }
    for (; i < here.n; i++) free(here.v[i]);
    free(here.v);
    return s;
}

void patina_walk_opts_init(patina_walk_opts_t *opts)
{
    if (opts) memset(opts, 0, sizeof *opts);
}

patina_status patina_expand_paths(char ***files, size_t *n, const char *const *paths,
                                  size_t npaths, size_t *skipped, patina_file_report_fn on_error,
                                  void *user)
{
    patina_walk_opts_t o;
    patina_walk_stats_t st;
    patina_status s;
    patina_walk_opts_init(&o);
    o.on_error = on_error;
    o.user = user;
    s = patina_walk(files, n, paths, npaths, &o, &st);
    if (skipped) *skipped = s == PATINA_OK ? st.skipped : 0;
    return s;
}

patina_status patina_walk(char ***files, size_t *n, const char *const *paths, size_t npaths,
                          const patina_walk_opts_t *opts, patina_walk_stats_t *stats)
{
    walk_t w;
    size_t i;
    patina_status s = PATINA_OK;
    patina_walk_opts_t def;
    if (!files || !n || (npaths && !paths)) return patina__fail(PATINA_E_INVALID, "index: NULL argument");
    *files = NULL;
    *n = 0;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!opts) {
        patina_walk_opts_init(&def);
        opts = &def;
    }
    if ((opts->ninclude && !opts->include) || (opts->nexclude && !opts->exclude))
        return patina__fail(PATINA_E_INVALID, "index: NULL pattern list");
    for (i = 0; i < opts->ninclude + opts->nexclude; i++) {
        const char *pat = i < opts->ninclude ? opts->include[i] : opts->exclude[i - opts->ninclude];
        if (!pat || !*pat) return patina__fail(PATINA_E_INVALID, "index: empty file pattern");
    }
    memset(&w, 0, sizeof w);
    w.o = opts;
    for (i = 0; i < npaths && s == PATINA_OK; i++) {
        struct stat st;
        if (!strcmp(paths[i], "-")) { /* standard input: a video stream for patina_index_files */
            char *p = strdup("-");
            if (!p || strvec_push(&w.out, p) != 0) {
                free(p);
                s = nomem();
            }
        } else if (stat(paths[i], &st) != 0) {
            int err = errno;
            walk_skip(&w, paths[i], err == ENOENT ? PATINA_E_NOTFOUND : PATINA_E_IO,
                      "index: cannot access '%s': %s", paths[i], strerror(err));
        } else if (S_ISDIR(st.st_mode)) {
            int r = idset_add(&w.dirs, st.st_dev, st.st_ino);
            size_t len = strlen(paths[i]);
            /* entries are "<operand>/<name>" ("<operand><name>" after a trailing slash) */
            w.base = len + (len && paths[i][len - 1] == '/' ? 0 : 1);
            if (r < 0) s = nomem();
            else if (r > 0) s = walk_dir(&w, paths[i], 0);
        } else { /* a file named: always tried */
            char *p = strdup(paths[i]);
            if (!p) s = nomem();
            else if (S_ISREG(st.st_mode)) s = walk_file(&w, p, &st);
            else if (strvec_push(&w.out, p) != 0) { /* a pipe or device named explicitly is read */
                free(p);
                s = nomem();
            }
        }
    }
    free(w.dirs.v);
    free(w.files.v);
    if (s != PATINA_OK) {
        strvec_free(&w.out);
        return s;
    }
    if (stats) {
        stats->skipped = w.skipped;
        stats->others = w.others;
    }
    *files = w.out.v;
    *n = w.out.n;
    return PATINA_OK;
}

/* ------------------------------------------------------------------ indexing */

/* SLOT_DUP: a duplicate left out (skip_duplicates). */
typedef enum { SLOT_EMPTY, SLOT_READ, SLOT_SKIP, SLOT_DUP, SLOT_FAILED, SLOT_DECODED } slot_state;

typedef struct slot {
    const char *path;          /* borrowed from files[] */
    char *key;                 /* its key in the collection (malloc'd; indexing only) */
    int have_key;              /* a record with this key exists */
    char *dup_of;              /* a duplicate: the other key with this content (malloc'd) */
    slot_state state;
    void *data;                /* encoded bytes (malloc'd) until decoded */
    size_t size;
    uint8_t sha[32];
    int64_t mtime;
    patina_image_info_t info;
    patina_image_t img;
    int gpu;                   /* decoded (or being decoded) on the GPU (exact or nvJPEG) */
    int have_old;              /* a record with this key exists */
    uint8_t old_sha[32];
    patina_status status;
    char error[PATINA_ERROR_MAX];  /* SLOT_FAILED: why, naming the file */
    patina_decode_report_t report; /* decoder warnings */
} slot_t;

struct producer;

typedef struct job {
    slot_t *slots;
    const patina_decode_opts_t *dopts; /* the context's limits; strict */
    int hash;                          /* stage 1 computes SHA-256 and skips stored files */
    struct producer *prod;             /* index runs: stage 1 also finds each file's key and stored record */
} job_t;

static void slot_fail(slot_t *s, patina_status st)
{
    s->state = SLOT_FAILED;
    s->status = st;
    snprintf(s->error, sizeof s->error, "%s", patina_last_error());
    free(s->data);
    s->data = NULL;
}

static void lookup_one(struct producer *p, slot_t *s, int worker);

/* Stage 1: (index runs: the file's key and stored record,) read, hash,
 * probe, check the limits against the header (before any decoder, CPU or
 * GPU, sees the file). Files stored with the same hash are skipped. */
static void read_one(void *arg, size_t i, int worker)
{
    job_t *j = arg;
    slot_t *s = &j->slots[i];
    struct stat st;
    patina_status r;
    if (s->state != SLOT_EMPTY) return;
    if (j->prod) {
        lookup_one(j->prod, s, worker);
        if (s->state != SLOT_EMPTY) return;
    }
    r = patina_file_read(&s->data, &s->size, s->path, &j->dopts->limits);
    if (r != PATINA_OK) {
        slot_fail(s, r);
        return;
    }
    if (j->hash) {
        s->mtime = stat(s->path, &st) == 0 ? (int64_t)st.st_mtime : 0;
        patina_sha256(s->sha, s->data, s->size);
        if (s->have_old && memcmp(s->sha, s->old_sha, 32) == 0) {
            s->state = SLOT_SKIP;
            free(s->data);
            s->data = NULL;
            return;
        }
    }
    r = patina_image_probe(&s->info, s->data, s->size, s->path);
    if (r == PATINA_OK) r = patina_limits_check(&j->dopts->limits, &s->info, s->path);
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
    r = patina_image_decode_with(&s->img, &s->report, s->data, s->size, j->dopts, s->path);
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
    free(s->key);
    free(s->dup_of);
    patina_image_release(&s->img);
    memset(s, 0, sizeof *s);
}

/* Contents met in a run: SHA-256 -> index of the first file with it in
 * files[]. Open addressing, linear probing, at most half full. */
typedef struct shaent {
    uint8_t sha[32];
    size_t file;
    int used;
} shaent_t;

typedef struct shaset {
    shaent_t *v;   /* (cap) slots, cap a power of two */
    size_t n, cap;
} shaset_t;

static size_t shaset_slot(const shaset_t *s, const uint8_t sha[32])
{
    uint64_t h;
    size_t i;
    memcpy(&h, sha, 8); /* a SHA-256 is uniform already */
    for (i = (size_t)h & (s->cap - 1); s->v[i].used && memcmp(s->v[i].sha, sha, 32); i = (i + 1) & (s->cap - 1)) {}
    return i;
}

/* The first file with content sha; adds `file` as it when there is none
 * (then returns `file`). (size_t)-1 when out of memory. */
static size_t shaset_first(shaset_t *s, const uint8_t sha[32], size_t file)
{
    size_t i, k;
    if (2 * (s->n + 1) > s->cap) {
        shaset_t g = {calloc(s->cap ? 2 * s->cap : 1024, sizeof(shaent_t)), 0, s->cap ? 2 * s->cap : 1024};
        if (!g.v) return (size_t)-1;
        for (k = 0; k < s->cap; k++)
            if (s->v[k].used) g.v[shaset_slot(&g, s->v[k].sha)] = s->v[k];
        g.n = s->n;
        free(s->v);
        *s = g;
    }
    i = shaset_slot(s, sha);
    if (s->v[i].used) return s->v[i].file;
    memcpy(s->v[i].sha, sha, 32);
    s->v[i].file = file;
    s->v[i].used = 1;
    s->n++;
    return file;
}

/* One window of files: stages 1-3 fill it (produce), stages 4-5 drain it
 * (consume). With the GPU device two windows alternate, so decoding the
 * next window on the CPU workers overlaps extraction and storage of this one. */
typedef struct window {
    slot_t *slots;            /* (capacity) */
    size_t first, take;       /* files[first .. first+take) */
    patina_jpeg_gpu_t *jdec;  /* nvJPEG decoder whose memory holds this window's images */
    patina_jpegx_gpu_t *xdec; /* or the exact GPU decoder */
    /* A call submitted to xdec and not finished yet (exact_finish): its
     * images, their slots, and the arrays the decoder fills (malloc'd). */
    size_t xn;
    slot_t **xslots;
    patina_image_t *xout;
    patina_status *xst;
} window_t;

typedef struct producer {
    patina_pool_t *pool;
    patina_collection_t *c;
    const patina_extractor_t *ex;
    patina_decode_opts_t dopts;   /* the context's limits; strict */
    const char *const *files;
    size_t n, capacity, desc_bytes;
    uint64_t budget;          /* bytes one window may hold (encoded + decoded) */
    unsigned char *probe;     /* desc_bytes scratch for the "already stored" check, one per pool worker */
    double share;             /* nvJPEG's share of the JPEGs (adapted unless fixed) */
    int share_fixed;
    double t_read, t_decode;  /* stage times, collected into the stats by the consumer */
    double tx[3];             /* the exact decoder's part of t_decode: entropy, setup, wait (patina_jpegx_times_t) */
    int skip_dups;
    shaset_t seen;            /* contents met in this run: SHA-256 -> first file */
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

/* A read JPEG nvJPEG may take: grey or YCbCr (CMYK and YCCK, 4 channels,
 * stay on the CPU, whose CMYK-to-RGB conversion nvJPEG does not apply), and
 * with apply_orientation only one stored upright (the CPU decoder turns the
 * others; nvJPEG does not). */
static int gpu_candidate(const producer_t *p, const slot_t *s)
{
    return s->state == SLOT_READ && s->info.format == PATINA_FORMAT_JPEG &&
           (s->info.channels == 1 || s->info.channels == 3) &&
           !(p->dopts.apply_orientation && patina_image__jpeg_orientation(s->data, s->size) != 1);
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
        if (gpu_candidate(p, s))
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
        if (gpu_candidate(p, s)) {
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

/* The exact decoder's times since `before`, added to tx (entropy, setup, wait). */
static void exact_times(double tx[3], const window_t *w, const patina_jpegx_times_t *before)
{
    patina_jpegx_times_t now;
    patina_gpu_jpegx_times(w->xdec, &now);
    tx[0] += now.entropy - before->entropy;
    tx[1] += now.setup - before->setup;
    tx[2] += now.wait - before->wait;
}

/* Forgets window w's exact-decoder call: its slot, output and status lists. */
static void window_drop_exact(window_t *w)
{
    free(w->xslots);
    free(w->xout);
    free(w->xst);
    w->xslots = NULL;
    w->xout = NULL;
    w->xst = NULL;
    w->xn = 0;
}

/* The second half of stage 3 with the exact GPU decoder: waits for the
 * device stage of the window's call; the images it did not finish (blocks
 * outside the exact range, or the decoder failed as a whole) are decoded on
 * the CPU, on the pool's workers, or on the calling thread when pool is
 * NULL (the consumer's side: the pool is the producer's then; such images
 * are rare). Their encoded bytes were kept for that. The decoder's times
 * go to tx (exact_times). */
static void exact_finish(double tx[3], window_t *w, job_t *job, patina_pool_t *pool)
{
    size_t i, redo = 0;
    patina_jpegx_times_t before;
    if (!w->xslots) return;
    patina_gpu_jpegx_times(w->xdec, &before);
    if (w->xn && patina_gpu_jpegx_finish(w->xdec, w->xout, w->xn, w->xst) != PATINA_OK) {
        patina_clear_error(); /* the decoder failed as a whole: the CPU decodes them all */
        for (i = 0; i < w->xn; i++) w->xst[i] = PATINA_E_FORMAT;
    }
    exact_times(tx, w, &before);
    for (i = 0; i < w->xn; i++) {
        slot_t *s = w->xslots[i];
        if (!s->gpu) continue;
        if (w->xst[i] == PATINA_OK) {
            free(s->data);
            s->data = NULL;
        } else {
            memset(&s->img, 0, sizeof s->img);
            s->gpu = 0;
            s->state = SLOT_READ;
            redo++;
        }
    }
    if (redo && pool) patina_pool_run(pool, w->take, decode_one, job);
    else if (redo)
        for (i = 0; i < w->take; i++) decode_one(job, i, 0);
    window_drop_exact(w);
}

/* Stage 3 with the exact GPU decoder: every read JPEG (CMYK and YCCK too; not
 * those to be turned upright, which the CPU decoder turns) goes to it: the
 * workers entropy-decode, the GPU finishes, the images stay in the decoder's
 * device memory. What it does not take (warnings, damage, odd sampling) and
 * the other formats are then decoded on the CPU workers while the device
 * finishes, which gives the CPU path's pixels, warnings and errors. With
 * `defer` the call is left open for the consumer (exact_finish before it
 * extracts), so the producer goes on to the next window while the device
 * finishes this one. */
static void decode_exact(producer_t *p, window_t *w, job_t *job, int defer)
{
    size_t i, k = 0, n = 0;
    const void **data;
    size_t *size;
    patina_jpegx_times_t before;
    for (i = 0; i < w->take; i++) {
        slot_t *s = &w->slots[i];
        n += s->state == SLOT_READ && s->info.format == PATINA_FORMAT_JPEG;
    }
    patina_gpu_jpegx_times(w->xdec, &before);
    w->xn = 0;
    w->xslots = malloc((n ? n : 1) * sizeof *w->xslots);
    w->xout = calloc(n ? n : 1, sizeof *w->xout);
    w->xst = malloc((n ? n : 1) * sizeof *w->xst);
    data = malloc((n ? n : 1) * sizeof *data);
    size = malloc((n ? n : 1) * sizeof *size);
    if (n && w->xslots && w->xout && w->xst && data && size) {
        for (i = 0; i < w->take; i++) {
            slot_t *s = &w->slots[i];
            if (s->state != SLOT_READ || s->info.format != PATINA_FORMAT_JPEG) continue;
            if (p->dopts.apply_orientation && patina_image__jpeg_orientation(s->data, s->size) != 1) continue;
            w->xslots[k] = s;
            data[k] = s->data;
            size[k] = s->size;
            w->xout[k].width = s->info.width;
            w->xout[k].height = s->info.height;
            k++;
        }
        if (k && patina_gpu_jpegx_submit(w->xdec, p->pool, w->xout, data, size, k, w->xst) != PATINA_OK) {
            patina_clear_error(); /* the decoder failed as a whole: the CPU decodes them all */
            k = 0;
        }
        w->xn = k;
        /* On their way to the device: the CPU pass below leaves them alone;
         * exact_finish frees their bytes, or gives them back to the CPU. */
        for (i = 0; i < k; i++) {
            slot_t *s = w->xslots[i];
            if (w->xst[i] != PATINA_OK) continue;
            s->img = w->xout[i];
            s->gpu = 1;
            s->state = SLOT_DECODED;
        }
    }
    exact_times(p->tx, w, &before);
    free(data);
    free(size);
    if (!w->xslots || !w->xout || !w->xst) window_drop_exact(w); /* out of memory: nothing was submitted */
    patina_pool_run(p->pool, w->take, decode_one, job);
    if (!defer) exact_finish(p->tx, w, job, p->pool);
}

/* The first files of paths[0 .. n) whose sizes on disk fit in `budget`
 * bytes, at least one: bounds what stage 1 reads. */
static size_t cut_by_file_size(const char *const *paths, size_t n, uint64_t budget)
{
    uint64_t used = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        struct stat st;
        uint64_t b = stat(paths[i], &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
        if (i > 0 && used + b > budget) break;
        used += b;
    }
    return i;
}

/* After stage 1: the prefix of slots[0 .. take) whose read images (encoded
 * bytes + decoded RGB bytes) fit in `budget`, at least one read image; the
 * slots past the cut are cleared (their files are read again later). */
static size_t cut_by_memory(slot_t *slots, size_t take, uint64_t budget)
{
    uint64_t used = 0;
    size_t i, kept = 0, j;
    for (i = 0; i < take; i++) {
        slot_t *s = &slots[i];
        if (s->state == SLOT_READ) {
            uint64_t b = (uint64_t)s->size + 3 * (uint64_t)s->info.width * (uint64_t)s->info.height;
            if (kept > 0 && used + b > budget) break;
            used += b;
            kept++;
        }
    }
    for (j = i; j < take; j++) slot_clear(&slots[j]);
    return i;
}

/* After stage 1 (the window cut): marks the files of new keys whose
 * content is stored under another key, or was met earlier in this run
 * (windows are produced in file order, so the run's set also covers files
 * whose batch is not committed yet); with skip_dups they are left out. */
static void find_duplicates(producer_t *p, window_t *w)
{
    size_t i;
    for (i = 0; i < w->take; i++) {
        slot_t *s = &w->slots[i];
        size_t file = w->first + i, prev;
        patina_record_t rec;
        if (s->state != SLOT_READ && s->state != SLOT_SKIP) continue;
        prev = shaset_first(&p->seen, s->sha, file);
        if (s->have_key || s->state != SLOT_READ) continue;
        if (prev != file && prev != (size_t)-1) {
            if (patina_collection_key(p->c, p->files[prev], &s->dup_of) != PATINA_OK) s->dup_of = strdup(p->files[prev]);
        } else if (patina_collection_get_by_sha256(p->c, s->sha, &rec) == PATINA_OK) {
            if (strcmp(rec.key, s->key)) {
                s->dup_of = rec.key;
                rec.key = NULL;
            }
            patina_record_release(&rec);
        }
        if (s->dup_of && p->skip_dups) {
            s->state = SLOT_DUP;
            free(s->data);
            s->data = NULL;
        }
    }
    patina_clear_error();
}

/* The key of slot s's file and whether this table holds it already
 * ("already indexed" = same key, and a descriptor in this table: a second
 * family over stored images is not skipped), on pool worker `worker` (the
 * collection's reads run in parallel; each worker has its scratch). */
static void lookup_one(producer_t *p, slot_t *s, int worker)
{
    patina_record_t rec;
    patina_status r;
    if ((r = patina_collection_key(p->c, s->path, &s->key)) != PATINA_OK) {
        slot_fail(s, r);
        return;
    }
    if (patina_collection_get_by_key(p->c, s->key, &rec) == PATINA_OK) {
        s->have_key = 1;
        if (patina_collection_get_descriptor(p->c, patina_extractor_spec(p->ex), rec.id,
                                             p->probe + (size_t)worker * p->desc_bytes, p->desc_bytes) == PATINA_OK) {
            s->have_old = 1;
            memcpy(s->old_sha, rec.sha256, 32);
        }
        patina_record_release(&rec);
    }
    patina_clear_error();
}

/* Stages 1-3 for the files from `first`: read + hash + probe, skip what is
 * stored, cut at the memory budget, decode. Sets w->take (>= 1 when first < n). */
static void produce(producer_t *p, window_t *w, size_t first)
{
    size_t take = p->n - first < p->capacity ? p->n - first : p->capacity;
    size_t i;
    job_t job = {w->slots, &p->dopts, 1, p};
    double t0 = patina_now(), t1;
    w->first = first;
    take = cut_by_file_size(p->files + first, take, p->budget);
    for (i = 0; i < take; i++) w->slots[i].path = p->files[first + i];
    patina_pool_run(p->pool, take, read_one, &job);
    w->take = cut_by_memory(w->slots, take, p->budget);
    find_duplicates(p, w);
    t1 = patina_now();
    p->t_read += t1 - t0;
    if (w->jdec) decode_split(p, w, &job);
    else if (w->xdec) decode_exact(p, w, &job, 1);
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

/* The JPEG decoder of a run of extractors on their resolved devices (dev):
 * auto is the exact GPU decoder when every extractor runs on the GPU and
 * takes device images, else libjpeg-turbo. The GPU decoders need that. */
static patina_status choose_decoder(patina_jpeg_decoder *out, patina_jpeg_decoder want,
                                    const patina_extractor_t *const *ex, const patina_device *dev, size_t nex,
                                    const char *who)
{
    size_t e;
    for (e = 0; e < nex; e++)
        if (dev[e] != PATINA_DEVICE_GPU || !patina__extractor_reads_device(ex[e])) break;
    *out = want;
    /* auto: the exact GPU decoder (the same pixels as libjpeg-turbo, ahead of
     * it end to end for every family measured: docs/images.md) when every
     * extractor runs on the GPU and reads device images, else libjpeg-turbo.
     * nvJPEG (other pixels) is only used when asked for by name. */
    if (want == PATINA_JPEG_AUTO) *out = e == nex ? PATINA_JPEG_EXACT_GPU : PATINA_JPEG_LIBJPEG;
    if ((want == PATINA_JPEG_NVJPEG || want == PATINA_JPEG_EXACT_GPU) && e < nex) {
        const char *dname = want == PATINA_JPEG_NVJPEG ? "nvjpeg" : "exact-gpu";
        if (dev[e] != PATINA_DEVICE_GPU)
            return patina__fail(PATINA_E_INVALID, "%s: the %s decoder needs --device gpu (it leaves the images "
                                "in GPU memory); %s runs on %s", who, dname, patina_extractor_family(ex[e]),
                                patina_device_name(dev[e]));
        return patina__fail(PATINA_E_INVALID, "%s: family '%s' cannot read GPU-decoded images; use the libjpeg "
                            "decoder", who, patina_extractor_family(ex[e]));
    }
    return PATINA_OK;
}

void patina_index_opts_init(patina_index_opts_t *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    patina__options_init(PATINA_OPTIONS_INDEX, opts);
}

/* The message of image `img` that patina_extract_batch reported failed with
 * `st`. The batch ran on worker threads, whose messages this thread cannot
 * see; a batch of one runs on the calling thread, so extracting the image
 * again alone on the CPU gives the reason (a missing mask file, ...). */
static void extract_error(char *buf, size_t size, patina_context_t *ctx, const patina_extractor_t *ex,
                          const patina_image_t *img, const char *path, patina_status st)
{
    unsigned char *tmp = malloc(patina_extractor_bytes(ex) + 1);
    patina_status one = PATINA_OK;
    patina_clear_error();
    if (tmp && patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, tmp, img, 1, &one) == PATINA_OK &&
        one != PATINA_OK && *patina_last_error())
        snprintf(buf, size, "extract: %s failed for '%s': %s", patina_extractor_family(ex), path,
                 patina_last_error());
    else
        snprintf(buf, size, "extract: %s failed for '%s' (%s)", patina_extractor_family(ex), path,
                 patina_status_str(st));
    free(tmp);
}

/* ------------------------------------------------------------ video files */

/* A video file's frames flow in batches of at most opts.batch frames and
 * half of opts.batch_memory (decoded planes + RGB): one batch is filled by
 * the reader on its own thread (libavcodec decodes on its threads) while
 * the previous one is converted to RGB and hashed on the workers,
 * extracted and stored; a stream of any length holds two batches. A batch
 * also closes opts.video_max_delay_ms after its first frame, when the
 * storing side is ready for it (vring_t): a live stream's frames do not
 * wait for a full batch. */

typedef struct vbatch {
    patina__vframe_t **raw;     /* (cap) decoded frames, freed once converted */
    patina_video_frame_t *info; /* (cap) */
    size_t n;
    uint64_t used;              /* bytes of its frames: decoded planes + RGB */
    patina_status end;          /* PATINA_OK: more may follow; PATINA_DONE; or the error that ended the stream */
    char msg[PATINA_ERROR_MAX]; /* the error's message (set on the filling thread) */
} vbatch_t;

static void vbatch_open(vbatch_t *b)
{
    b->n = 0;
    b->used = 0;
    b->end = PATINA_OK;
    b->msg[0] = '\0';
}

/* Puts what the reader gave into b: a frame (s = PATINA_OK), or the end of
 * the stream with its message. 1 when b is closed by it: the stream's end,
 * cap frames, or its memory share reached. */
static int vbatch_put(vbatch_t *b, patina_status s, patina__vframe_t *raw, const patina_video_frame_t *info,
                      const char *msg, size_t cap, uint64_t budget)
{
    if (s != PATINA_OK) {
        b->end = s;
        snprintf(b->msg, sizeof b->msg, "%s", msg);
        return 1;
    }
    b->raw[b->n] = raw;
    b->info[b->n] = *info;
    b->n++;
    b->used += patina__vframe_bytes(raw) + 3 * (uint64_t)info->width * (uint64_t)info->height;
    return b->n >= cap || b->used >= budget;
}

/* The next frame of v, or the stream's end; *msg gets this thread's error
 * message when it failed. */
static patina_status vbatch_read(patina_video_t *v, patina__vframe_t **raw, patina_video_frame_t *info,
                                 char (*msg)[PATINA_ERROR_MAX])
{
    patina_status s = patina__video_next_raw(v, raw, info);
    (*msg)[0] = '\0';
    if (s != PATINA_OK && s != PATINA_DONE) snprintf(*msg, sizeof *msg, "%s", patina_last_error());
    return s;
}

/* Fills b on this thread (no reader thread could start). */
static void vbatch_fill(patina_video_t *v, vbatch_t *b, size_t cap, uint64_t budget)
{
    patina__vframe_t *raw;
    patina_video_frame_t info;
    char msg[PATINA_ERROR_MAX];
    vbatch_open(b);
    for (;;) {
        raw = NULL;
        const patina_status s = vbatch_read(v, &raw, &info, &msg);
        if (vbatch_put(b, s, raw, &info, msg, cap, budget)) break;
    }
}

/* The reader thread of one video and the two batches it fills in turn,
 * 0, 1, 0, ... -- the order index_video stores them in. A batch is FREE
 * (stored, or never used), OPEN (holding frames, still taking more) or
 * READY (closed: index_video's until it has stored it). The reader closes
 * the batch it fills when it is full or the stream ends; index_video,
 * waiting for an OPEN batch, closes it once its first frame is
 * `delay` seconds old, and the reader's next frame opens the other
 * batch. Everything below the mutex but the frames of a READY batch,
 * which only index_video touches. */
enum { VB_FREE, VB_OPEN, VB_READY };

typedef struct vring {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC (patina_now's clock) */
    patina_video_t *v;
    vbatch_t *b;       /* the run's two batches */
    int state[2];
    double t_first[2]; /* when batch k's first frame was decoded (patina_now) */
    int fill;          /* the batch the reader's next frame goes to */
    size_t cap;
    uint64_t budget;
    double delay;      /* seconds */
    int stop;          /* index_video gives up: the reader ends at its next frame */
} vring_t;

static void *vring_main(void *arg)
{
    vring_t *g = arg;
    for (;;) {
        patina__vframe_t *raw = NULL;
        patina_video_frame_t info;
        char msg[PATINA_ERROR_MAX];
        const patina_status s = vbatch_read(g->v, &raw, &info, &msg);
        int k;
        pthread_mutex_lock(&g->mu);
        while (!g->stop && g->state[g->fill] == VB_READY) pthread_cond_wait(&g->cv, &g->mu);
        if (g->stop) {
            pthread_mutex_unlock(&g->mu);
            patina__vframe_free(&raw);
            return NULL;
        }
        k = g->fill;
        if (g->state[k] == VB_FREE) {
            g->state[k] = VB_OPEN;
            g->t_first[k] = patina_now();
            vbatch_open(&g->b[k]);
        }
        if (vbatch_put(&g->b[k], s, raw, &info, msg, g->cap, g->budget)) {
            g->state[k] = VB_READY;
            g->fill = 1 - k;
        }
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        if (s != PATINA_OK) return NULL;
    }
}

/* Waits for batch k to be READY, or closes it when OPEN past its delay.
 * Returns the seconds waited. */
static double vring_take(vring_t *g, int k)
{
    const double t0 = patina_now();
    pthread_mutex_lock(&g->mu);
    for (;;) {
        if (g->state[k] == VB_READY) break;
        if (g->state[k] == VB_OPEN) {
            const double due = g->t_first[k] + g->delay;
            if (patina_now() >= due) {
                g->state[k] = VB_READY;
                if (g->fill == k) g->fill = 1 - k;
                pthread_cond_broadcast(&g->cv);
                break;
            }
            struct timespec ts;
            ts.tv_sec = (time_t)due;
            ts.tv_nsec = (long)((due - (double)ts.tv_sec) * 1e9);
            if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
            pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        } else {
            pthread_cond_wait(&g->cv, &g->mu);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return patina_now() - t0;
}

static void vring_give(vring_t *g, int k, int stop)
{
    pthread_mutex_lock(&g->mu);
    g->state[k] = VB_FREE;
    if (stop) g->stop = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static int vring_init(vring_t *g)
{
    pthread_condattr_t ca;
    int ok;
    if (pthread_mutex_init(&g->mu, NULL)) return 0;
    ok = !pthread_condattr_init(&ca);
    ok = ok && !pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) && !pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!ok) pthread_mutex_destroy(&g->mu);
    return ok;
}

static void vring_free(vring_t *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

typedef struct vjob {
    vbatch_t *b;
    patina_image_t *bufs;       /* (cap) owned RGB buffers, kept from batch to batch */
    patina_image_t *imgs;       /* (cap) views of bufs */
    uint8_t (*sha)[32];
    patina_status *st;
} vjob_t;

/* Converts frame i to RGB into buffer i (reused while frames keep their
 * size: fresh multi-megabyte buffers cost a page fault per 4 KiB) and
 * hashes its pixels (the record's content). imgs[i] borrows the buffer. */
static void vconvert_one(void *arg, size_t i, int worker)
{
    vjob_t *j = arg;
    patina_image_t *buf = &j->bufs[i];
    int w = patina__vframe_width(j->b->raw[i]), h = patina__vframe_height(j->b->raw[i]);
    (void)worker;
    j->st[i] = PATINA_OK;
    if (!buf->data || buf->width != w || buf->height != h) {
        patina_image_release(buf);
        j->st[i] = patina_image_init(buf, w, h);
    }
    if (j->st[i] == PATINA_OK) j->st[i] = patina__vframe_rgb_into(buf, j->b->raw[i]);
    patina__vframe_free(&j->b->raw[i]);
    memset(&j->imgs[i], 0, sizeof j->imgs[i]);
    if (j->st[i] != PATINA_OK) return;
    j->imgs[i] = *buf;
    j->imgs[i].owned = 0;
    patina_sha256(j->sha[i], buf->data, (size_t)buf->height * buf->stride);
}

static void vbatch_drop(vbatch_t *b)
{
    for (size_t i = 0; i < b->n; i++) patina__vframe_free(&b->raw[i]);
    b->n = 0;
}

/* What index_video shares with the run. */
typedef struct vrun {
    patina_context_t *ctx;
    patina_collection_t *c;
    const patina_extractor_t *ex;
    patina_device dev;
    patina_pool_t *pool;
    const patina_index_opts_t *o;
    size_t cap;
    uint64_t budget;            /* per batch */
    size_t desc_bytes;
    unsigned char *probe;       /* desc_bytes scratch */
    vbatch_t b[2];
    patina_image_t *bufs;       /* (cap) RGB buffers (owned), reused */
    patina_image_t *imgs;       /* (cap) views of bufs */
    uint8_t (*sha)[32];         /* (cap) */
    patina_status *st, *xst;    /* (cap) */
    char **keys;                /* (cap) */
    patina_insert_t *items;     /* (cap) */
    uint8_t *descs;             /* (cap, desc_bytes) */
    size_t *map;                /* (cap) */
    double t0;
    double t_convert;           /* seconds converting frames (counted as decoding) */
} vrun_t;

static void vrun_free(vrun_t *r)
{
    for (int k = 0; k < 2; k++) {
        free(r->b[k].raw);
        free(r->b[k].info);
    }
    if (r->bufs)
        for (size_t i = 0; i < r->cap; i++) patina_image_release(&r->bufs[i]);
    free(r->bufs);
    free(r->imgs);
    free(r->sha);
    free(r->st);
    free(r->xst);
    free(r->keys);
    free(r->items);
    free(r->descs);
    free(r->map);
    free(r->probe);
}

static patina_status vrun_init(vrun_t *r, size_t cap)
{
    size_t db = r->desc_bytes ? r->desc_bytes : 1;
    r->cap = cap;
    for (int k = 0; k < 2; k++) {
        r->b[k].raw = calloc(cap, sizeof *r->b[k].raw);
        r->b[k].info = calloc(cap, sizeof *r->b[k].info);
        if (!r->b[k].raw || !r->b[k].info) return PATINA_E_NOMEM;
    }
    r->bufs = calloc(cap, sizeof *r->bufs);
    r->imgs = calloc(cap, sizeof *r->imgs);
    r->sha = calloc(cap, sizeof *r->sha);
    r->st = calloc(cap, sizeof *r->st);
    r->xst = calloc(cap, sizeof *r->xst);
    r->keys = calloc(cap, sizeof *r->keys);
    r->items = calloc(cap, sizeof *r->items);
    r->descs = malloc(cap * db);
    r->map = calloc(cap, sizeof *r->map);
    r->probe = malloc(db);
    if (!r->bufs || !r->imgs || !r->sha || !r->st || !r->xst || !r->keys || !r->items || !r->descs || !r->map || !r->probe)
        return PATINA_E_NOMEM;
    return PATINA_OK;
}

/* Stores batch b of the video whose key is `fkey`: converts, skips frames
 * stored unchanged, extracts, puts in one transaction. A failed frame
 * (out of memory, extraction) fails the file: *ferr (empty until then)
 * gets the first message. Returns only errors that stop the run. */
static patina_status vbatch_store(vrun_t *r, vbatch_t *b, const char *fkey, const char *path, int64_t mtime,
                                  patina_index_stats_t *stats, patina_status *fst, char *ferr, size_t ferr_size)
{
    vjob_t job = {b, r->bufs, r->imgs, r->sha, r->st};
    size_t i, nb = 0, ni = 0;
    patina_status result = PATINA_OK;
    double t = patina_now();
    const size_t n = b->n;
    patina_pool_run(r->pool, n, vconvert_one, &job);
    b->n = 0; /* the frames are freed */
    r->t_convert += patina_now() - t;
    stats->t_decode += patina_now() - t;
    for (i = 0; i < n; i++) {
        char key[4096];
        patina_record_t rec;
        r->keys[i] = NULL;
        if (r->st[i] != PATINA_OK) {
            if (*fst == PATINA_OK) {
                *fst = r->st[i];
                snprintf(ferr, ferr_size, "video: frame %lld of '%s': %s", (long long)b->info[i].frame, path,
                         patina_status_str(r->st[i]));
            }
            continue;
        }
        patina_status ks = patina_video_key(key, sizeof key, fkey, &b->info[i]);
        if (ks == PATINA_OK && !(r->keys[i] = strdup(key)))
            ks = patina__fail(PATINA_E_NOMEM, "index: out of memory for the key of a frame of '%s'", path);
        if (ks != PATINA_OK) {
            if (*fst == PATINA_OK) {
                *fst = ks;
                snprintf(ferr, ferr_size, "%s", patina_last_error());
            }
            patina_image_release(&r->imgs[i]);
            continue;
        }
        /* stored already with these pixels (and a descriptor in this table): skipped */
        if (patina_collection_get_by_key(r->c, key, &rec) == PATINA_OK) {
            int same = !memcmp(rec.sha256, r->sha[i], 32) &&
                       patina_collection_get_descriptor(r->c, patina_extractor_spec(r->ex), rec.id, r->probe,
                                                        r->desc_bytes) == PATINA_OK;
            patina_record_release(&rec);
            if (same) {
                stats->skipped++;
                stats->frames_skipped++;
                patina_image_release(&r->imgs[i]);
                continue;
            }
        }
        r->map[nb] = i;
        r->imgs[nb] = r->imgs[i]; /* nb <= i: compacts the images to extract */
        if (nb != i) memset(&r->imgs[i], 0, sizeof r->imgs[i]);
        nb++;
    }
    patina_clear_error();
    t = patina_now();
    if (nb) result = patina_extract_batch(r->ctx, r->ex, r->dev, r->descs, r->imgs, nb, r->xst);
    stats->t_extract += patina_now() - t;
    t = patina_now();
    for (i = 0; i < nb && result == PATINA_OK; i++) {
        size_t f = r->map[i];
        patina_image_t *img = &r->imgs[i];
        if (r->xst[i] != PATINA_OK) {
            if (*fst == PATINA_OK) {
                *fst = r->xst[i];
                extract_error(ferr, ferr_size, r->ctx, r->ex, img, r->keys[f], r->xst[i]);
            }
            continue;
        }
        r->items[ni].key = r->keys[f];
        r->items[ni].size = (uint64_t)img->height * img->stride;
        memcpy(r->items[ni].sha256, r->sha[f], 32);
        r->items[ni].mtime = mtime;
        r->items[ni].width = img->width;
        r->items[ni].height = img->height;
        r->items[ni].desc = r->descs + i * r->desc_bytes;
        ni++;
        stats->pixels += (uint64_t)img->width * (uint64_t)img->height;
    }
    if (result == PATINA_OK && ni)
        result = patina_collection_put(r->c, patina_extractor_spec(r->ex), r->desc_bytes, r->items, ni, NULL);
    if (result == PATINA_OK) {
        stats->indexed += ni;
        stats->frames += ni;
    }
    stats->t_store += patina_now() - t;
    for (i = 0; i < nb; i++) patina_image_release(&r->imgs[i]);
    for (i = 0; i < n; i++) {
        free(r->keys[i]);
        r->keys[i] = NULL;
    }
    stats->seconds = patina_now() - r->t0;
    if (result == PATINA_OK && r->o->progress) r->o->progress(r->o->user, stats);
    return result;
}

/* Indexes the frames of one video file (or "-", standard input). A file
 * that cannot be opened, or ends in an error, is reported through on_error
 * and counted as failed; the frames stored before stay. Returns only
 * errors that stop the run (the store). */
static patina_status index_video(vrun_t *r, const char *path, patina_index_stats_t *stats)
{
    const patina_index_opts_t *o = r->o;
    patina_video_opts_t vo;
    patina_video_t *v = NULL;
    char *fkey = NULL;
    char ferr[PATINA_ERROR_MAX] = "";
    patina_status fst = PATINA_OK, result = PATINA_OK, s;
    int64_t mtime = 0;
    int cur = 0;
    struct stat st;
    patina_video_opts_init(&vo);
    vo.every_frames = o->video_every_frames;
    vo.every_ms = o->video_every_ms;
    vo.shots = o->video_shots;
    vo.limits = *patina_context_limits(r->ctx);
    vo.decoder = (patina_video_decoder)o->video_decoder;
    vo.latency_ms = o->video_max_delay_ms; /* a stream's decoder holds back at most this */
    {
        int dev = 0;
        if (patina_context_devices(r->ctx, &dev, 1) == 0) dev = 0;
        vo.gpu = dev; /* NVDEC on the context's (first) GPU */
    }
    if (!strcmp(path, "-")) {
        fkey = strdup(o->stdin_key ? o->stdin_key : "stdin");
        s = fkey ? PATINA_OK : patina__fail(PATINA_E_NOMEM, "index: out of memory");
    } else {
        s = patina_collection_key(r->c, path, &fkey);
        if (stat(path, &st) == 0) mtime = (int64_t)st.st_mtime;
    }
    if (s == PATINA_OK) s = patina_video_open(&v, path, &vo);
    if (s != PATINA_OK) {
        stats->failed++;
        if (o->on_error) o->on_error(o->user, path, s, patina_last_error());
        free(fkey);
        return PATINA_OK;
    }
    {
        vring_t g = {.v = v, .b = r->b, .cap = r->cap, .budget = r->budget,
                     .delay = (double)o->video_max_delay_ms / 1000.0};
        pthread_t th;
        int started = vring_init(&g);
        if (started && pthread_create(&th, NULL, vring_main, &g) != 0) {
            vring_free(&g);
            started = 0;
        }
        if (started) {
            for (;;) {
                vbatch_t *b = &r->b[cur];
                stats->t_wait += vring_take(&g, cur);
                result = vbatch_store(r, b, fkey, path, mtime, stats, &fst, ferr, sizeof ferr);
                /* the stream's last batch, or a failed store: the reader stops (read before
                 * the batch goes back: the reader may open it again at once) */
                const int last = b->end != PATINA_OK || result != PATINA_OK;
                vring_give(&g, cur, last);
                if (last) break;
                cur = 1 - cur;
            }
            pthread_join(th, NULL);
            vring_free(&g);
            vbatch_drop(&r->b[1 - cur]); /* frames read past a failed store */
        } else {
            /* no thread: each batch read, then stored */
            for (;;) {
                vbatch_fill(v, &r->b[cur], r->cap, r->budget);
                result = vbatch_store(r, &r->b[cur], fkey, path, mtime, stats, &fst, ferr, sizeof ferr);
                if (r->b[cur].end != PATINA_OK || result != PATINA_OK) break;
            }
        }
    }
    {
        vbatch_t *b = &r->b[cur];
        if (result == PATINA_OK && fst == PATINA_OK && b->end != PATINA_DONE) {
            fst = b->end;
            snprintf(ferr, sizeof ferr, "%s", b->msg);
        }
    }
    if (result == PATINA_OK) {
        if (fst != PATINA_OK) {
            stats->failed++;
            if (o->on_error) o->on_error(o->user, path, fst, ferr);
        } else {
            stats->videos++;
        }
    }
    patina_video_free(v);
    free(fkey);
    return result;
}

/* What patina_index_files does with each file: a video ("-", or a file
 * whose first bytes are a video container's and not an image's) or an
 * image (everything else; the image path reports what it cannot read). */
typedef struct classify {
    const char *const *files;
    uint8_t *video; /* (n) */
} classify_t;

static void classify_one(void *arg, size_t i, int worker)
{
    classify_t *c = arg;
    unsigned char head[512];
    ssize_t got;
    int fd;
    (void)worker;
    c->video[i] = 0;
    if (!strcmp(c->files[i], "-")) {
        c->video[i] = 1;
        return;
    }
    fd = open(c->files[i], O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return;
    got = read(fd, head, sizeof head);
    close(fd);
    if (got > 0 && patina_format_sniff(head, (size_t)got) == PATINA_FORMAT_UNKNOWN &&
        patina_video_sniff(head, (size_t)got))
        c->video[i] = 1;
}

patina_status patina_index_files(patina_context_t *ctx, patina_collection_t *c,
                                 const patina_extractor_t *ex, const char *const *files,
                                 size_t n, const patina_index_opts_t *opts_in,
                                 patina_index_stats_t *stats)
{
    patina_index_opts_t opts;
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
    patina_jpegx_gpu_t *xdec[2] = {NULL, NULL};
    patina_jpeg_decoder decoder;
    int cur = 0, overlap;
    uint8_t *video = NULL; /* (n) 1: a video file */
    size_t pos, nvideo = 0;
    vrun_t vr;
    double t_finish = 0, tx_finish = 0; /* the store side's waits for the exact decoder (exact_finish) */

    if (opts_in) opts = *opts_in;
    else patina_index_opts_init(&opts);
    PATINA_TRY(patina__options_validate(PATINA_OPTIONS_INDEX, &opts));
    if (opts.video_every_frames > 1 && opts.video_every_ms)
        return patina__fail(PATINA_E_INVALID, "index: a video is sampled every N frames or every S seconds, not both");
    if (!(opts.video_shots >= 0 && opts.video_shots <= 1))
        return patina__fail(PATINA_E_INVALID, "index: the shot threshold %g is outside [0, 1]", opts.video_shots);
    if (!opts.batch || !opts.batch_memory || !opts.video_max_delay_ms) { /* 0 stands for the default */
        patina_index_opts_t def;
        patina_index_opts_init(&def);
        if (!opts.batch) opts.batch = def.batch;
        if (!opts.batch_memory) opts.batch_memory = def.batch_memory;
        if (!opts.video_max_delay_ms) opts.video_max_delay_ms = def.video_max_delay_ms;
    }
    window = opts.batch;
    memset(stats, 0, sizeof *stats);
    stats->files = n;
    PATINA_TRY(patina_context_resolve(ctx, ex, opts.device, &dev));
    stats->device = dev;
    /* The CPU and hybrid devices use the worker pool to extract: decoding
     * cannot overlap there (the pool runs one job at a time). */
    overlap = dev == PATINA_DEVICE_GPU;

    memset(&prod, 0, sizeof prod);
    memset(&vr, 0, sizeof vr);
    prod.pool = patina__context_workers_acquire(ctx); /* this run's turn; released at the end */
    prod.c = c;
    prod.ex = ex;
    prod.dopts.limits = *patina_context_limits(ctx);
    prod.dopts.strict = opts.strict != 0;
    prod.dopts.apply_orientation = opts.apply_orientation != 0;
    prod.files = files;
    prod.n = n;
    prod.capacity = window;
    prod.desc_bytes = desc_bytes;
    /* With overlap two windows are in flight: each gets half the memory. */
    prod.budget = overlap ? opts.batch_memory / 2 : opts.batch_memory;
    prod.probe = malloc((desc_bytes ? desc_bytes : 1) * (size_t)patina_pool_size(prod.pool));
    prod.skip_dups = opts.skip_duplicates != 0;
    prod.share_fixed = opts.nvjpeg_share >= 0;
    prod.share = opts.nvjpeg_share > 0 ? (opts.nvjpeg_share < 1 ? opts.nvjpeg_share : 1)
                 : opts.nvjpeg_share == 0 ? 1.0 : 0.7;
    /* auto: the exact GPU decoder where the images can stay on the device */
    if ((result = choose_decoder(&decoder, opts.jpeg_decoder, &ex, &dev, 1, "index")) != PATINA_OK) goto done;
    if (decoder == PATINA_JPEG_NVJPEG && (result = patina__context_jpeg(ctx, jdec)) != PATINA_OK) goto done;
    /* The context's decoders: their pinned staging and device buffers are
     * made once, not per run (they cost more than a run of a few windows). */
    if (decoder == PATINA_JPEG_EXACT_GPU && (result = patina__context_jpegx(ctx, xdec)) != PATINA_OK) {
        if (opts.jpeg_decoder != PATINA_JPEG_AUTO) goto done;
        decoder = PATINA_JPEG_LIBJPEG; /* auto: the decoder that needs no device memory of its own */
        result = PATINA_OK;
        patina_clear_error();
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
    win[0].xdec = xdec[0];
    win[1].xdec = xdec[1];

    /* Which files are videos: their runs of images go through the windows
     * below, each video through index_video, in file order. */
    if (n && !(video = malloc(n))) {
        result = patina__fail(PATINA_E_NOMEM, "index: out of memory for %zu files", n);
        goto done;
    }
    if (n) {
        classify_t cl = {files, video};
        patina_pool_run(prod.pool, n, classify_one, &cl);
        for (i = 0; i < n; i++) nvideo += video[i];
    }
    if (nvideo) {
        vr.ctx = ctx;
        vr.c = c;
        vr.ex = ex;
        vr.dev = dev;
        vr.pool = prod.pool;
        vr.o = &opts;
        vr.desc_bytes = desc_bytes;
        vr.budget = opts.batch_memory / 2; /* two batches in flight */
        vr.t0 = t0;
        if (vrun_init(&vr, window) != PATINA_OK) {
            result = patina__fail(PATINA_E_NOMEM, "index: out of memory for a batch of %zu frames", window);
            goto done;
        }
    }
    for (pos = 0; pos < n && result == PATINA_OK;) {
        size_t end = pos;
        if (video[pos]) {
            result = index_video(&vr, files[pos], stats);
            pos++;
            continue;
        }
        while (end < n && !video[end]) end++;
        prod.n = end; /* this run of images */
        cur = 0;
        produce(&prod, &win[0], pos);
        pos = end;
        while (win[cur].take > 0 && result == PATINA_OK) {
            window_t *w = &win[cur];
            size_t nb = 0, next = w->first + w->take;
            pthread_t th;
            double t_stage;
            produce_arg_t pa = {&prod, &win[1 - cur], next};
            int started = 0;

            win[1 - cur].take = 0;
            if (overlap && next < prod.n) started = pthread_create(&th, NULL, produce_main, &pa) == 0;
            /* The exact decoder's last round of this window, while the
             * producer reads the next one (the pool is its now). */
            if (w->xslots) {
                job_t xjob = {w->slots, &prod.dopts, 1, NULL};
                double tx[3] = {0, 0, 0};
                t_stage = patina_now();
                exact_finish(tx, w, &xjob, started ? NULL : prod.pool);
                t_finish += patina_now() - t_stage;
                tx_finish += tx[2];
            }

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
                        if (s->gpu) /* a device image: the CPU cannot read it to say more */
                            snprintf(s->error, sizeof s->error, "extract: %s failed for '%s' (%s)",
                                     patina_extractor_family(ex), s->path, patina_status_str(st[i]));
                        else
                            extract_error(s->error, sizeof s->error, ctx, ex, &s->img, s->path, st[i]);
                        continue;
                    }
                    items[ni].key = s->key;
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
            /* Reports in file order, from this thread. */
            if (result == PATINA_OK)
                for (i = 0; i < w->take; i++) {
                    slot_t *s = &w->slots[i];
                    stats->warned += s->report.warnings > 0;
                    if (s->dup_of) {
                        char msg[PATINA_ERROR_MAX];
                        stats->duplicates++;
                        snprintf(msg, sizeof msg, "index: '%s' has the same content (SHA-256) as '%s'; %s", s->key,
                                 s->dup_of, s->state == SLOT_DUP ? "not indexed (skip duplicates)" : "indexed as well");
                        if (opts.on_duplicate) opts.on_duplicate(opts.user, s->path, PATINA_OK, msg);
                    }
                    if (s->state == SLOT_FAILED) {
                        stats->failed++;
                        if (opts.on_error) opts.on_error(opts.user, s->path, s->status, s->error);
                    } else if (s->report.warnings && opts.on_warning) {
                        opts.on_warning(opts.user, s->path, PATINA_OK, s->report.warning);
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
            } else if (result == PATINA_OK && next < prod.n) {
                produce(&prod, &win[cur], next);
            }
            stats->seconds = patina_now() - t0;
            stats->t_read = prod.t_read;
            stats->t_decode = prod.t_decode + vr.t_convert + t_finish;
            stats->t_jpegx_entropy = prod.tx[0];
            stats->t_jpegx_setup = prod.tx[1];
            stats->t_jpegx_wait = prod.tx[2] + tx_finish;
            stats->t_starved = stats->t_wait + t_finish;
            if (result == PATINA_OK && opts.progress) opts.progress(opts.user, stats);
        }
    }

done:
    /* A window produced but not consumed (the run stopped on an error)
     * leaves its call open on a decoder the context keeps: finish it. */
    for (int k = 0; k < 2; k++)
        if (win[k].xslots) {
            char msg[PATINA_ERROR_MAX];
            snprintf(msg, sizeof msg, "%s", patina_last_error());
            if (win[k].xn) (void)patina_gpu_jpegx_finish(win[k].xdec, win[k].xout, win[k].xn, win[k].xst);
            if (result != PATINA_OK) patina__fail(result, "%s", msg);
            free(win[k].xslots);
            free(win[k].xout);
            free(win[k].xst);
        }
    patina__context_workers_release(ctx);
    free(video);
    vrun_free(&vr);
    for (int k = 0; k < 2; k++) {
        if (!win[k].slots) continue;
        for (i = 0; i < window; i++) slot_clear(&win[k].slots[i]);
        free(win[k].slots);
    }
    stats->seconds = patina_now() - t0;
    stats->t_starved = stats->t_wait + t_finish;
    free(prod.probe);
    free(prod.seen.v);
    free(imgs);
    free(st);
    free(items);
    free(map);
    free(descs);
    return result;
}

/* ------------------------------------------------------- parallel loading */

void patina_load_opts_init(patina_load_opts_t *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->batch_memory = PATINA_DEFAULT_BATCH_MEMORY;
}

patina_status patina_load_files(patina_context_t *ctx, patina_image_t *images,
                                patina_load_result_t *results, size_t *taken,
                                const char *const *paths, size_t n, const patina_load_opts_t *opts)
{
    patina_load_opts_t o;
    patina_decode_opts_t dopts;
    slot_t *slots;
    job_t job;
    size_t take, i;
    patina_pool_t *pool;
    if (taken) *taken = 0;
    if (!ctx || !taken || (n && (!images || !results || !paths)))
        return patina__fail(PATINA_E_INVALID, "load: NULL argument");
    if (n == 0) return PATINA_OK;
    if (opts) o = *opts;
    else patina_load_opts_init(&o);
    if (!o.batch_memory) o.batch_memory = PATINA_DEFAULT_BATCH_MEMORY;
    dopts.limits = *patina_context_limits(ctx);
    dopts.strict = o.strict != 0;
    dopts.apply_orientation = o.apply_orientation != 0;
    take = cut_by_file_size(paths, n, o.batch_memory);
    slots = calloc(take, sizeof *slots);
    if (!slots) return patina__fail(PATINA_E_NOMEM, "load: out of memory for %zu files", take);
    for (i = 0; i < take; i++) slots[i].path = paths[i];
    job.slots = slots;
    job.dopts = &dopts;
    job.hash = 0;
    job.prod = NULL;
    pool = patina__context_workers_acquire(ctx);
    patina_pool_run(pool, take, read_one, &job);
    take = cut_by_memory(slots, take, o.batch_memory);
    patina_pool_run(pool, take, decode_one, &job);
    patina__context_workers_release(ctx);
    for (i = 0; i < take; i++) {
        slot_t *s = &slots[i];
        patina_load_result_t *r = &results[i];
        memset(&images[i], 0, sizeof images[i]);
        r->report = s->report;
        if (s->state == SLOT_DECODED) {
            r->status = PATINA_OK;
            r->error[0] = '\0';
            images[i] = s->img; /* moved out of the slot */
            memset(&s->img, 0, sizeof s->img);
        } else {
            r->status = s->status != PATINA_OK ? s->status : PATINA_E_INTERNAL;
            snprintf(r->error, sizeof r->error, "%s", s->error);
        }
        slot_clear(s);
    }
    free(slots);
    *taken = take;
    return PATINA_OK;
}

/* ------------------------------------------------------- describing inputs */

/* The first inputs whose encoded sizes fit in `budget`, at least one. */
static size_t cut_inputs(const patina_input_t *in, size_t n, uint64_t budget)
{
    uint64_t used = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        struct stat st;
        uint64_t b = in[i].path ? (stat(in[i].path, &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0)
                                : (uint64_t)in[i].size;
        if (i > 0 && used + b > budget) break;
        used += b;
    }
    return i;
}

/* Stage 1 for bytes in memory: copied into the slot (the decoders free
 * it), probed and checked against the limits as read_one does. */
static void take_bytes(slot_t *s, const patina_input_t *in, const patina_decode_opts_t *dopts)
{
    patina_status r;
    if (!in->data && in->size) {
        slot_fail(s, patina__fail(PATINA_E_INVALID, "extract: '%s': no data", s->path));
        return;
    }
    s->data = malloc(in->size ? in->size : 1);
    if (!s->data) {
        slot_fail(s, patina__fail(PATINA_E_NOMEM, "extract: out of memory for the %zu bytes of '%s'", in->size,
                                  s->path));
        return;
    }
    if (in->size) memcpy(s->data, in->data, in->size);
    s->size = in->size;
    r = patina_image_probe(&s->info, s->data, s->size, s->path);
    if (r == PATINA_OK) r = patina_limits_check(&dopts->limits, &s->info, s->path);
    if (r != PATINA_OK) {
        slot_fail(s, r);
        return;
    }
    s->state = SLOT_READ;
}

patina_status patina_extract_files(patina_context_t *ctx, const patina_extractor_t *const *ex, size_t nex,
                                   void *const *descs, patina_extract_result_t *results, size_t *taken,
                                   const patina_input_t *in, size_t n, const patina_index_opts_t *opts)
{
    patina_index_opts_t o;
    patina_decode_opts_t dopts;
    patina_jpeg_decoder decoder;
    patina_device *dev = NULL;
    slot_t *slots = NULL;
    patina_image_t *imgs = NULL;
    patina_status *st = NULL, s = PATINA_OK;
    size_t *map = NULL, take, i, e, nb = 0, maxbytes = 1;
    unsigned char *tmp = NULL;
    producer_t prod;
    window_t w;
    job_t job;
    if (taken) *taken = 0;
    if (!ctx || !taken || (n && (!ex || !nex || !descs || !results || !in)))
        return patina__fail(PATINA_E_INVALID, "extract: NULL argument");
    if (n == 0) return PATINA_OK;
    for (e = 0; e < nex; e++)
        if (!ex[e] || !descs[e]) return patina__fail(PATINA_E_INVALID, "extract: NULL extractor or record buffer %zu", e);
    if (opts) o = *opts;
    else patina_index_opts_init(&o);
    if (!o.batch_memory) o.batch_memory = PATINA_DEFAULT_BATCH_MEMORY;
    if (!(dev = malloc(nex * sizeof *dev))) return patina__fail(PATINA_E_NOMEM, "extract: out of memory");
    for (e = 0; e < nex && s == PATINA_OK; e++) {
        s = patina_context_resolve(ctx, ex[e], o.device, &dev[e]);
        if (patina_extractor_bytes(ex[e]) > maxbytes) maxbytes = patina_extractor_bytes(ex[e]);
    }
    if (s == PATINA_OK) s = choose_decoder(&decoder, o.jpeg_decoder, ex, dev, nex, "extract");
    if (s != PATINA_OK) {
        free(dev);
        return s;
    }
    memset(&dopts, 0, sizeof dopts);
    dopts.limits = *patina_context_limits(ctx);
    dopts.strict = o.strict != 0;
    dopts.apply_orientation = o.apply_orientation != 0;
    take = cut_inputs(in, n, o.batch_memory);
    slots = calloc(take, sizeof *slots);
    imgs = calloc(take, sizeof *imgs);
    st = calloc(take, sizeof *st);
    map = calloc(take, sizeof *map);
    tmp = malloc(take * maxbytes);
    if (!slots || !imgs || !st || !map || !tmp) {
        s = patina__fail(PATINA_E_NOMEM, "extract: out of memory for %zu images", take);
        goto out;
    }
    memset(&prod, 0, sizeof prod);
    memset(&w, 0, sizeof w);
    job.slots = slots;
    job.dopts = &dopts;
    job.hash = 0;
    job.prod = NULL;
    /* The workers' turn for the whole call: the context's GPU decoders and
     * the images they leave in device memory are this call's until it ends. */
    prod.pool = patina__context_workers_acquire(ctx);
    prod.dopts = dopts;
    prod.share_fixed = o.nvjpeg_share >= 0;
    prod.share = o.nvjpeg_share > 0 ? (o.nvjpeg_share < 1 ? o.nvjpeg_share : 1) : o.nvjpeg_share == 0 ? 1.0 : 0.7;
    w.slots = slots;
    w.take = take;
    if (decoder == PATINA_JPEG_EXACT_GPU) {
        patina_jpegx_gpu_t *xd[2];
        s = patina__context_jpegx(ctx, xd);
        w.xdec = xd[0];
        if (s != PATINA_OK && o.jpeg_decoder == PATINA_JPEG_AUTO) { /* as patina_index_files */
            decoder = PATINA_JPEG_LIBJPEG;
            s = PATINA_OK;
            patina_clear_error();
        }
    } else if (decoder == PATINA_JPEG_NVJPEG) {
        patina_jpeg_gpu_t *jd[2];
        s = patina__context_jpeg(ctx, jd);
        w.jdec = jd[0];
    }
    if (s != PATINA_OK) {
        patina__context_workers_release(ctx);
        goto out;
    }
    for (i = 0; i < take; i++) {
        slots[i].path = in[i].path ? in[i].path : in[i].name ? in[i].name : "<memory>";
        if (!in[i].path) take_bytes(&slots[i], &in[i], &dopts);
    }
    patina_clear_error();
    patina_pool_run(prod.pool, take, read_one, &job);
    take = cut_by_memory(slots, take, o.batch_memory);
    w.take = take;
    if (w.jdec) decode_split(&prod, &w, &job);
    else if (w.xdec) decode_exact(&prod, &w, &job, 0);
    else patina_pool_run(prod.pool, take, decode_one, &job);
    for (i = 0; i < take; i++) {
        slot_t *sl = &slots[i];
        patina_extract_result_t *r = &results[i];
        memset(r, 0, sizeof *r);
        r->report = sl->report;
        if (sl->state == SLOT_DECODED) {
            r->width = sl->img.width;
            r->height = sl->img.height;
            r->gpu_decoded = sl->gpu;
            map[nb] = i;
            imgs[nb++] = sl->img;
        } else {
            r->status = sl->status != PATINA_OK ? sl->status : PATINA_E_INTERNAL;
            snprintf(r->error, sizeof r->error, "%s", sl->error);
        }
        for (e = 0; e < nex; e++)
            memset((unsigned char *)descs[e] + i * patina_extractor_bytes(ex[e]), 0, patina_extractor_bytes(ex[e]));
    }
    for (e = 0; e < nex && nb && s == PATINA_OK; e++) {
        const size_t bytes = patina_extractor_bytes(ex[e]);
        s = patina_extract_batch(ctx, ex[e], dev[e], tmp, imgs, nb, st);
        for (i = 0; i < nb && s == PATINA_OK; i++) {
            slot_t *sl = &slots[map[i]];
            patina_extract_result_t *r = &results[map[i]];
            if (st[i] == PATINA_OK) {
                memcpy((unsigned char *)descs[e] + map[i] * bytes, tmp + i * bytes, bytes);
                continue;
            }
            if (r->status != PATINA_OK) continue; /* the first failure names the input */
            r->status = st[i];
            if (sl->gpu) /* a device image: the CPU cannot read it to say more */
                snprintf(r->error, sizeof r->error, "extract: %s failed for '%s' (%s)", patina_extractor_family(ex[e]),
                         sl->path, patina_status_str(st[i]));
            else
                extract_error(r->error, sizeof r->error, ctx, ex[e], &sl->img, sl->path, st[i]);
        }
    }
    patina__context_workers_release(ctx);
    for (i = 0; i < take; i++) {
        slot_clear(&slots[i]);
        if (results[i].status != PATINA_OK) /* failed for one extractor: no record from the others either */
            for (e = 0; e < nex; e++)
                memset((unsigned char *)descs[e] + i * patina_extractor_bytes(ex[e]), 0, patina_extractor_bytes(ex[e]));
    }
    if (s == PATINA_OK) *taken = take;
out:
    free(dev);
    free(slots);
    free(imgs);
    free(st);
    free(map);
    free(tmp);
    return s;
}
