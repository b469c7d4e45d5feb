/* Bulk index jobs of `patina serve` (see internal.h): a server-side folder
 * (under --import-dir) or an uploaded tar archive, indexed into one
 * collection by one job thread, one job at a time, oldest first.
 *
 * A folder job walks the folder (patina_expand_paths) and indexes it in
 * chunks of JOB_CHUNK files per table (patina_index_files, one transaction
 * per batch, files already stored with the same content skipped), checking
 * for cancellation between chunks; the served tables see the rows at their
 * next call (the collection's version moved). A tar job adds its
 * regular files one by one through the same path as an upload (colls_add),
 * keyed by their names in the archive.
 *
 * Jobs live in memory, and with --jobs-file also in that file: the whole
 * list as JSON (each job as GET /v1/jobs/{id} shows it, and the next id),
 * rewritten atomically (a temporary file, fsync, rename, fsync of the
 * folder) at every submission, start, end and cancellation, and at most once
 * a second as a job advances. A start reads it back: finished jobs are
 * shown as they were, ids go on from the last; an unfinished folder job is
 * queued again from its start (its files already indexed are skipped as
 * unchanged, so the counts come out whole) with "resumed" counting the
 * restarts; an unfinished tar job ends as failed (its archive was only in
 * memory; what it committed is kept). SIGTERM with --jobs-file leaves queued
 * jobs queued and queues the running folder job again. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "serve/internal.h"

#define JOB_CHUNK 256    /* files per patina_index_files call (cancellation points) */
#define JOB_ERRORS 100   /* error messages a job keeps */
#define JOBS_KEPT 1000   /* finished jobs remembered */

enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_FAILED, JOB_CANCELLED };
enum { CANCEL_USER = 1, CANCEL_STOP = 2 }; /* job_t.cancel: DELETE, or the server stopping */
#define JOBS_FILE_VERSION 1
/* Seconds since the epoch (job times are shown to people). */
static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *const state_names[] = {"queued", "running", "done", "failed", "cancelled"};

typedef struct job {
    uint64_t id;
    scoll_t *sc;                  /* NULL: a finished job of a collection not served now */
    char *coll;                   /* the collection's name */
    unsigned resumed;             /* times queued again by a restart (--jobs-file) */
    char *folder;                 /* folder job: the real path */
    uint8_t *tar;                 /* tar job: the archive (owned) and its members */
    size_t tar_size;
    wire_tar_member_t *members;
    size_t nmembers;
    char **families;              /* (nfam) specs; none: the collection's tables */
    size_t nfam;
    int state;
    atomic_int cancel;
    uint64_t files, processed, indexed, skipped, failed;
    json_t *errors;               /* array of strings, at most JOB_ERRORS */
    uint64_t nerrors;
    double created, started, finished;
    char message[1024];           /* why a job failed */
    struct job *next;             /* newer first */
} job_t;

struct jobs {
    server_t *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_t *all;
    size_t queued, kept;
    uint64_t next_id;
    int stop;
    pthread_t thread;
    pthread_mutex_t save_mu;      /* orders the writes of --jobs-file (taken before mu) */
    double last_save;
    int save_failed;              /* the last write failed (logged once) */
    int started;                  /* the first write (at start) succeeded */
};

static json_t *job_json(const job_t *j);

/* ------------------------------------------------------------ jobs file */

/* Writes data to path atomically: a temporary file beside it, fsync,
 * rename, fsync of the folder. 0 or -1 with errno. */
static int write_atomic(const char *path, const char *data, size_t size)
{
    char tmp[PATH_MAX + 8], dir[PATH_MAX];
    int fd, e;
    size_t off = 0;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w < 0 && errno == EINTR) continue;
        if (w == 0) errno = EIO;
        if (w <= 0) goto fail;
        off += (size_t)w;
    }
    if (fsync(fd) != 0) goto fail;
    if (close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0) goto fail;
    snprintf(dir, sizeof dir, "%s", path);
    if ((fd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
        fsync(fd);
        close(fd);
    }
    return 0;
fail:
    e = errno;
    if (fd >= 0) close(fd);
    unlink(tmp);
    errno = e;
    return -1;
}

/* Writes the jobs file (with --jobs-file): always when `force`, else when
 * the last write is a second old. Called without js->mu held. -1 when the
 * write failed (errno; logged once until a write succeeds again). */
static int jobs_save(struct jobs *js, int force)
{
    const char *path = js->srv->cfg->jobs_file;
    json_t *doc, *arr;
    char *text;
    job_t *j;
    double now = wall();
    int rc = 0;
    if (!path) return 0;
    pthread_mutex_lock(&js->save_mu);
    pthread_mutex_lock(&js->mu);
    if (!force && now - js->last_save < 1.0) {
        pthread_mutex_unlock(&js->mu);
        pthread_mutex_unlock(&js->save_mu);
        return 0;
    }
    js->last_save = now;
    arr = json_array();
    for (j = js->all; j; j = j->next) json_array_append_new(arr, job_json(j));
    doc = json_pack("{s:i, s:I, s:o}", "patina_jobs", JOBS_FILE_VERSION, "next_id", (json_int_t)js->next_id,
                    "jobs", arr);
    pthread_mutex_unlock(&js->mu);
    text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!text) errno = ENOMEM;
    if (!text || write_atomic(path, text, strlen(text)) != 0) {
        int e = errno;
        rc = -1;
        if (js->started && !js->save_failed) serve_log("--jobs-file %s: cannot write it: %s (jobs go on; retried at the next change)",
                                        path, strerror(errno));
        js->save_failed = 1;
        errno = e;
    } else if (js->save_failed) {
        serve_log("--jobs-file %s: written again", path);
        js->save_failed = 0;
    }
    free(text);
    pthread_mutex_unlock(&js->save_mu);
    return rc;
}

/* 1 when the real path `real` is `dir` or under it. */
static int under_dir(const char *real, const char *dir)
{
    size_t n = strlen(dir);
    return n && !strncmp(real, dir, n) && (real[n] == '/' || real[n] == '\0' || !strcmp(dir, "/"));
}

static int state_index(const char *name)
{
    int i;
    for (i = 0; name && i < 5; i++)
        if (!strcmp(name, state_names[i])) return i;
    return -1;
}

static uint64_t get_count(const json_t *o, const char *key, int *ok)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        *ok = 0;
        return 0;
    }
    return (uint64_t)json_integer_value(v);
}

static double get_time(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : 0;
}

static void job_free(job_t *j);

/* A job of the jobs file, as it was (NULL: malformed, why in `why`). An
 * unfinished one is queued again (a folder job whose collection is served
 * and whose folder is still under --import-dir) or ended as failed. */
static job_t *job_restore(struct jobs *js, const json_t *o, char *why, size_t whysize)
{
    server_t *srv = js->srv;
    const char *coll = json_string_value(json_object_get(o, "collection"));
    const char *kind = json_string_value(json_object_get(o, "kind"));
    const char *folder = json_string_value(json_object_get(o, "folder"));
    const char *msg = json_string_value(json_object_get(o, "message"));
    json_t *errors = json_object_get(o, "errors"), *fams = json_object_get(o, "families");
    int ok = 1, state = state_index(json_string_value(json_object_get(o, "state")));
    job_t *j;
    size_t i;
    if (!coll || !kind || (strcmp(kind, "folder") && strcmp(kind, "tar")) || (!strcmp(kind, "folder") && !folder) ||
        state < 0 || !json_is_array(errors) || (fams && !json_is_array(fams))) {
        snprintf(why, whysize, "a job without its collection, kind, folder, state or errors");
        return NULL;
    }
    if (!(j = calloc(1, sizeof *j))) {
        snprintf(why, whysize, "out of memory");
        return NULL;
    }
    j->id = get_count(o, "id", &ok);
    j->coll = strdup(coll);
    j->sc = colls_find(srv, coll);
    j->folder = !strcmp(kind, "folder") ? strdup(folder) : NULL;
    j->state = state;
    j->files = get_count(o, "files", &ok);
    j->processed = get_count(o, "processed", &ok);
    j->indexed = get_count(o, "indexed", &ok);
    j->skipped = get_count(o, "skipped", &ok);
    j->failed = get_count(o, "failed", &ok);
    j->nerrors = get_count(o, "error_count", &ok);
    j->resumed = json_object_get(o, "resumed") ? (unsigned)get_count(o, "resumed", &ok) : 0;
    j->errors = json_array();
    for (i = 0; i < json_array_size(errors) && i < JOB_ERRORS; i++) {
        const char *e = json_string_value(json_array_get(errors, i));
        if (e) json_array_append_new(j->errors, json_string(e));
    }
    if (msg) snprintf(j->message, sizeof j->message, "%s", msg);
    j->created = get_time(o, "created");
    j->started = get_time(o, "started");
    j->finished = get_time(o, "finished");
    j->nfam = json_array_size(fams);
    j->families = j->nfam ? calloc(j->nfam, sizeof *j->families) : NULL;
    for (i = 0; i < j->nfam && j->families; i++) {
        const char *f = json_string_value(json_array_get(fams, i));
        if (!f || !(j->families[i] = strdup(f))) ok = 0;
    }
    if (!ok || !j->id || !j->coll || (folder && !j->folder) || (j->nfam && !j->families)) {
        snprintf(why, whysize, "job %llu: a count, id or family that is not what this server writes",
                 (unsigned long long)j->id);
        job_free(j);
        return NULL;
    }
    if (state == JOB_QUEUED || state == JOB_RUNNING) {
        char real[PATH_MAX];
        if (j->folder && j->sc && srv->import_dir[0] && realpath(j->folder, real) &&
            under_dir(real, srv->import_dir)) {
            j->state = JOB_QUEUED;
            j->files = j->processed = j->indexed = j->skipped = j->failed = j->nerrors = 0;
            json_array_clear(j->errors);
            j->started = 0;
            j->resumed++;
        } else {
            j->state = JOB_FAILED;
            j->finished = wall();
            snprintf(j->message, sizeof j->message, "%s",
                     !j->folder ? "interrupted: the server stopped before the job ended, and a tar job's archive "
                                  "is not kept (what it committed is kept)"
                     : !j->sc  ? "interrupted: the server stopped before the job ended, and its collection is "
                                 "not served now (what it committed is kept)"
                               : "interrupted: the server stopped before the job ended, and its folder is gone "
                                 "or no longer under --import-dir (what it committed is kept)");
        }
    }
    return j;
}

/* Reads --jobs-file (a missing file: no jobs yet). -1 when it cannot be
 * read or is not a jobs file of this version (said on stderr). */
static int jobs_load(struct jobs *js)
{
    const char *path = js->srv->cfg->jobs_file;
    json_error_t e;
    json_t *doc, *arr;
    char why[512];
    size_t i, resumed = 0, n;
    if (!path) return 0;
    if (access(path, F_OK) != 0 && errno == ENOENT) return 0;
    doc = json_load_file(path, 0, &e);
    arr = json_object_get(doc, "jobs");
    if (!doc || json_integer_value(json_object_get(doc, "patina_jobs")) != JOBS_FILE_VERSION ||
        !json_is_array(arr) || !json_is_integer(json_object_get(doc, "next_id"))) {
        fprintf(stderr, "patina serve: --jobs-file %s: %s%s; it is left as it is (move it away or name another file)\n",
                path, doc ? "not a jobs file of this version of patina serve" : "cannot read it: ",
                doc ? "" : e.text);
        json_decref(doc);
        return -1;
    }
    js->next_id = (uint64_t)json_integer_value(json_object_get(doc, "next_id"));
    n = json_array_size(arr);
    for (i = n; i-- > 0;) { /* newest first in the file; each pushed at the head */
        job_t *j = job_restore(js, json_array_get(arr, i), why, sizeof why);
        if (!j) {
            fprintf(stderr, "patina serve: --jobs-file %s: %s; it is left as it is\n", path, why);
            json_decref(doc);
            return -1;
        }
        if (j->id >= js->next_id) js->next_id = j->id + 1;
        if (j->state == JOB_QUEUED) js->queued++, resumed++;
        else js->kept++;
        j->next = js->all;
        js->all = j;
    }
    json_decref(doc);
    serve_log("--jobs-file %s: %zu jobs, %zu queued again", path, n, resumed);
    return 0;
}

static void job_error(struct jobs *js, job_t *j, const char *msg)
{
    pthread_mutex_lock(&js->mu);
    j->nerrors++;
    if (json_array_size(j->errors) < JOB_ERRORS) json_array_append_new(j->errors, wire_json_str(msg));
    pthread_mutex_unlock(&js->mu);
}

/* A job's final state (and why it failed), under the jobs' lock. */
static void set_state(struct jobs *js, job_t *j, int state, const char *why)
{
    pthread_mutex_lock(&js->mu);
    j->state = state;
    if (why) snprintf(j->message, sizeof j->message, "%s", why);
    pthread_mutex_unlock(&js->mu);
}

typedef struct fctx {
    struct jobs *js;
    job_t *j;
} fctx_t;

static void on_file_error(void *user, const char *path, patina_status s, const char *msg)
{
    fctx_t *f = user;
    (void)path;
    job_error(f->js, f->j, msg && *msg ? msg : patina_status_str(s));
}

/* The tables a job writes: those it names, else the collection's, else cedd. */
static int job_tables(job_t *j, char ***out, size_t *n)
{
    size_t i;
    *out = NULL;
    *n = 0;
    if (j->nfam) {
        *out = calloc(j->nfam, sizeof **out);
        if (!*out) return -1;
        for (i = 0; i < j->nfam; i++) (*out)[i] = strdup(j->families[i]);
        *n = j->nfam;
        return 0;
    }
    if (patina_collection_tables(j->sc->c, out, n) != PATINA_OK) return -1;
    if (!*n) {
        free(*out);
        *out = calloc(1, sizeof **out);
        if (!*out) return -1;
        (*out)[0] = strdup("cedd");
        *n = 1;
    }
    return 0;
}

/* The state of a job whose loop ended: done, cancelled, or with
 * --jobs-file a folder job the server's stop interrupted: queued again. */
static int end_state(struct jobs *js, job_t *j, uint64_t total)
{
    int c = atomic_load(&j->cancel);
    if (!c || j->processed >= total) return JOB_DONE;
    if (c == CANCEL_STOP && js->srv->cfg->jobs_file && j->folder) return JOB_QUEUED;
    return JOB_CANCELLED;
}

static void run_folder(struct jobs *js, job_t *j)
{
    server_t *srv = js->srv;
    patina_context_t *ctx = NULL;
    patina_context_opts_t copts;
    char **files = NULL, **tables = NULL;
    size_t nfiles = 0, ntables = 0, off, t, skipped = 0;
    fctx_t fc = {js, j};
    const char *paths[1] = {j->folder};
    patina_status s;

    patina_context_opts_init(&copts);
    copts.threads = srv->cfg->job_threads;
    copts.limits = srv->limits;
    if ((s = patina_context_new(&ctx, &copts)) != PATINA_OK ||
        (s = patina_expand_paths(&files, &nfiles, paths, 1, &skipped, on_file_error, &fc)) != PATINA_OK ||
        job_tables(j, &tables, &ntables) != 0) {
        set_state(js, j, JOB_FAILED, *patina_last_error() ? patina_last_error() : "out of memory");
        goto out;
    }
    pthread_mutex_lock(&js->mu);
    j->files = nfiles;
    j->failed += skipped;
    pthread_mutex_unlock(&js->mu);
    for (off = 0; off < nfiles && !atomic_load(&j->cancel); off += JOB_CHUNK) {
        size_t n = nfiles - off < JOB_CHUNK ? nfiles - off : JOB_CHUNK;
        for (t = 0; t < ntables; t++) {
            patina_extractor_t *ex = NULL;
            patina_index_opts_t io;
            patina_index_stats_t st;
            if ((s = patina_extractor_new(&ex, tables[t])) != PATINA_OK) {
                set_state(js, j, JOB_FAILED, patina_last_error());
                goto out;
            }
            patina_index_opts_init(&io);
            io.on_error = on_file_error;
            io.user = &fc;
            s = patina_index_files(ctx, j->sc->c, ex, (const char *const *)files + off, n, &io, &st);
            patina_extractor_free(ex);
            pthread_mutex_lock(&js->mu);
            j->indexed += st.indexed;
            j->skipped += st.skipped;
            j->failed += st.failed;
            pthread_mutex_unlock(&js->mu);
            if (s != PATINA_OK) {
                char why[600];
                snprintf(why, sizeof why, "%s (everything indexed before it is kept)",
                         *patina_last_error() ? patina_last_error() : patina_status_str(s));
                set_state(js, j, JOB_FAILED, why);
                goto out;
            }
        }
        pthread_mutex_lock(&js->mu);
        j->processed = off + n;
        pthread_mutex_unlock(&js->mu);
        jobs_save(js, 0);
    }
    set_state(js, j, end_state(js, j, nfiles), NULL);
out:
    for (off = 0; off < nfiles; off++) free(files[off]);
    free(files);
    for (t = 0; t < ntables; t++) free(tables[t]);
    free(tables);
    patina_context_free(ctx);
}

static void run_tar(struct jobs *js, job_t *j)
{
    size_t i;
    pthread_mutex_lock(&js->mu);
    j->files = j->nmembers;
    pthread_mutex_unlock(&js->mu);
    for (i = 0; i < j->nmembers && !atomic_load(&j->cancel); i++) {
        const wire_tar_member_t *m = &j->members[i];
        patina_record_t rec;
        int created = 0, same = 0;
        uint64_t id;
        patina_status s;
        memset(&rec, 0, sizeof rec);
        if (!j->nfam && patina_collection_get_by_key(j->sc->c, m->name, &rec) == PATINA_OK) {
            uint8_t sha[32];
            patina_sha256(sha, m->data, m->size);
            same = !memcmp(sha, rec.sha256, 32);
            patina_record_release(&rec);
        }
        if (same) {
            pthread_mutex_lock(&js->mu);
            j->skipped++;
            j->processed = i + 1;
            pthread_mutex_unlock(&js->mu);
            continue;
        }
        s = colls_add(j->sc, m->name, m->data, m->size, (const char *const *)j->families, j->nfam, 0, &created, &id);
        if (s != PATINA_OK) job_error(js, j, serve_msg);
        pthread_mutex_lock(&js->mu);
        if (s == PATINA_OK) j->indexed++;
        else j->failed++;
        j->processed = i + 1;
        pthread_mutex_unlock(&js->mu);
        jobs_save(js, 0);
    }
    set_state(js, j, end_state(js, j, j->nmembers),
              atomic_load(&j->cancel) == CANCEL_STOP && j->processed < j->nmembers
                  ? "the server stopped before the job ended (what it committed is kept)" : NULL);
}

static void job_free(job_t *j)
{
    size_t i;
    free(j->folder);
    free(j->coll);
    free(j->tar);
    wire_tar_free(j->members, j->nmembers);
    for (i = 0; i < j->nfam; i++) free(j->families[i]);
    free(j->families);
    json_decref(j->errors);
    free(j);
}

static void *jobs_main(void *arg)
{
    struct jobs *js = arg;
    pthread_mutex_lock(&js->mu);
    for (;;) {
        job_t *j, *oldest = NULL;
        while (!js->stop && !js->queued) pthread_cond_wait(&js->cv, &js->mu);
        if (js->stop) break;
        for (j = js->all; j; j = j->next)
            if (j->state == JOB_QUEUED) oldest = j;
        js->queued--;
        oldest->state = JOB_RUNNING;
        oldest->started = wall();
        pthread_mutex_unlock(&js->mu);
        jobs_save(js, 1);
        if (oldest->folder) run_folder(js, oldest);
        else run_tar(js, oldest);
        pthread_mutex_lock(&js->mu);
        if (oldest->state == JOB_QUEUED) { /* the server stops; the next start resumes it */
            oldest->started = 0;
            js->queued++;
            serve_log("job %llu: stopped after %llu of %llu files; queued for the next start",
                      (unsigned long long)oldest->id, (unsigned long long)oldest->processed,
                      (unsigned long long)oldest->files);
            continue;
        }
        oldest->finished = wall();
        /* the archive is no longer needed */
        free(oldest->tar);
        oldest->tar = NULL;
        wire_tar_free(oldest->members, oldest->nmembers);
        oldest->members = NULL;
        serve_log("job %llu: %s: %llu indexed, %llu skipped, %llu failed of %llu files",
                  (unsigned long long)oldest->id, state_names[oldest->state], (unsigned long long)oldest->indexed,
                  (unsigned long long)oldest->skipped, (unsigned long long)oldest->failed,
                  (unsigned long long)oldest->files);
        /* forget the oldest finished jobs past JOBS_KEPT */
        if (++js->kept > JOBS_KEPT) {
            job_t **pp = &js->all, **victim = NULL;
            for (; *pp; pp = &(*pp)->next)
                if ((*pp)->state >= JOB_DONE) victim = pp;
            if (victim) {
                job_t *v = *victim;
                *victim = v->next;
                job_free(v);
                js->kept--;
            }
        }
        pthread_mutex_unlock(&js->mu);
        jobs_save(js, 1);
        pthread_mutex_lock(&js->mu);
    }
    pthread_mutex_unlock(&js->mu);
    return NULL;
}

/* Frees the jobs and their lock (the job thread is not running). */
static void jobs_free(server_t *srv)
{
    struct jobs *js = srv->jobs;
    job_t *j;
    while ((j = js->all)) {
        js->all = j->next;
        job_free(j);
    }
    pthread_mutex_destroy(&js->mu);
    pthread_mutex_destroy(&js->save_mu);
    pthread_cond_destroy(&js->cv);
    free(js);
    srv->jobs = NULL;
}

int jobs_start(server_t *srv)
{
    struct jobs *js = calloc(1, sizeof *js);
    if (!js) return -1;
    js->srv = srv;
    js->next_id = 1;
    pthread_mutex_init(&js->mu, NULL);
    pthread_mutex_init(&js->save_mu, NULL);
    pthread_cond_init(&js->cv, NULL);
    srv->jobs = js;
    /* the file as this server sees it (resumed and interrupted jobs); a
     * file that cannot be written stops the start */
    if (jobs_load(js) != 0) {
        jobs_free(srv);
        return -1;
    }
    if (jobs_save(js, 1) != 0) {
        fprintf(stderr, "patina serve: --jobs-file %s: cannot write it: %s\n", srv->cfg->jobs_file, strerror(errno));
        jobs_free(srv);
        return -1;
    }
    js->started = 1;
    if (pthread_create(&js->thread, NULL, jobs_main, js) != 0) {
        jobs_free(srv);
        return -1;
    }
    return 0;
}

void jobs_stop(server_t *srv)
{
    struct jobs *js = srv->jobs;
    job_t *j;
    if (!js) return;
    pthread_mutex_lock(&js->mu);
    js->stop = 1;
    for (j = js->all; j; j = j->next) {
        if (j->state == JOB_RUNNING) atomic_store(&j->cancel, CANCEL_STOP);
        if (j->state == JOB_QUEUED && !srv->cfg->jobs_file) {
            j->state = JOB_CANCELLED;
            j->finished = wall();
        }
    }
    pthread_cond_signal(&js->cv);
    pthread_mutex_unlock(&js->mu);
    pthread_join(js->thread, NULL);
    jobs_save(js, 1);
    jobs_free(srv);
}

int jobs_submit(server_t *srv, scoll_t *sc, const char *folder, uint8_t *tar, size_t tar_size,
                wire_tar_member_t *members, size_t nmembers, json_t *families, uint64_t *id)
{
    struct jobs *js = srv->jobs;
    job_t *j;
    size_t i;
    pthread_mutex_lock(&js->mu);
    if (js->queued >= srv->cfg->max_jobs) {
        pthread_mutex_unlock(&js->mu);
        return -1;
    }
    pthread_mutex_unlock(&js->mu);
    j = calloc(1, sizeof *j);
    if (!j) return -2;
    j->sc = sc;
    j->coll = strdup(sc->name);
    j->folder = folder ? strdup(folder) : NULL;
    j->tar = tar;
    j->tar_size = tar_size;
    j->members = members;
    j->nmembers = nmembers;
    j->errors = json_array();
    j->nfam = json_array_size(families);
    j->families = j->nfam ? calloc(j->nfam, sizeof *j->families) : NULL;
    for (i = 0; i < j->nfam; i++) j->families[i] = strdup(json_string_value(json_array_get(families, i)));
    j->created = wall();
    pthread_mutex_lock(&js->mu);
    j->id = js->next_id++;
    j->next = js->all;
    js->all = j;
    js->queued++;
    pthread_cond_signal(&js->cv);
    pthread_mutex_unlock(&js->mu);
    *id = j->id;
    jobs_save(js, 1);
    return 0;
}

static json_t *job_json(const job_t *j)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer((json_int_t)j->id));
    json_object_set_new(o, "collection", json_string(j->coll));
    json_object_set_new(o, "kind", json_string(j->folder ? "folder" : "tar"));
    if (j->folder) json_object_set_new(o, "folder", wire_json_str(j->folder));
    json_object_set_new(o, "state", json_string(state_names[j->state]));
    json_object_set_new(o, "files", json_integer((json_int_t)j->files));
    json_object_set_new(o, "processed", json_integer((json_int_t)j->processed));
    json_object_set_new(o, "indexed", json_integer((json_int_t)j->indexed));
    json_object_set_new(o, "skipped", json_integer((json_int_t)j->skipped));
    json_object_set_new(o, "failed", json_integer((json_int_t)j->failed));
    json_object_set_new(o, "error_count", json_integer((json_int_t)j->nerrors));
    json_object_set(o, "errors", j->errors);
    if (j->message[0]) json_object_set_new(o, "message", wire_json_str(j->message));
    json_object_set_new(o, "created", json_real(j->created));
    json_object_set_new(o, "started", j->started > 0 ? json_real(j->started) : json_null());
    json_object_set_new(o, "finished", j->finished > 0 ? json_real(j->finished) : json_null());
    {
        json_t *fams = json_array();
        size_t i;
        for (i = 0; i < j->nfam; i++) json_array_append_new(fams, json_string(j->families[i]));
        json_object_set_new(o, "families", fams);
    }
    json_object_set_new(o, "resumed", json_integer((json_int_t)j->resumed));
    return o;
}

json_t *jobs_get(server_t *srv, uint64_t id)
{
    struct jobs *js = srv->jobs;
    json_t *o = NULL;
    job_t *j;
    pthread_mutex_lock(&js->mu);
    for (j = js->all; j && j->id != id; j = j->next) {
    }
    if (j) o = job_json(j);
    pthread_mutex_unlock(&js->mu);
    return o;
}

json_t *jobs_list(server_t *srv)
{
    struct jobs *js = srv->jobs;
    json_t *a = json_array();
    job_t *j;
    pthread_mutex_lock(&js->mu);
    for (j = js->all; j; j = j->next) json_array_append_new(a, job_json(j));
    pthread_mutex_unlock(&js->mu);
    return a;
}

int jobs_cancel(server_t *srv, uint64_t id)
{
    struct jobs *js = srv->jobs;
    job_t *j;
    int rc;
    pthread_mutex_lock(&js->mu);
    for (j = js->all; j && j->id != id; j = j->next) {
    }
    if (!j) rc = -1;
    else if (j->state >= JOB_DONE) rc = 1;
    else {
        atomic_store(&j->cancel, 1);
        if (j->state == JOB_QUEUED) {
            j->state = JOB_CANCELLED;
            j->finished = wall();
            js->queued--;
            js->kept++;
        }
        rc = 0;
    }
    pthread_mutex_unlock(&js->mu);
    if (rc == 0) jobs_save(js, 1);
    return rc;
}

void jobs_counts(server_t *srv, unsigned long counts[5])
{
    struct jobs *js = srv->jobs;
    job_t *j;
    memset(counts, 0, 5 * sizeof *counts);
    if (!js) return;
    pthread_mutex_lock(&js->mu);
    for (j = js->all; j; j = j->next) counts[j->state]++;
    pthread_mutex_unlock(&js->mu);
}
