/* Bulk index jobs of `patina serve` (see internal.h): a server-side folder
 * (under --import-dir) or an uploaded tar archive, indexed into one
 * collection by one job thread, one job at a time, oldest first.
 *
 * A folder job walks the folder (patina_expand_paths) and indexes it in
 * chunks of JOB_CHUNK files per table (patina_index_files, one transaction
 * per batch, files already stored with the same content skipped), checking
 * for cancellation between chunks; after each chunk the collection's search
 * indexes are marked stale (reloaded by the next search). A tar job adds its
 * regular files one by one through the same path as an upload (colls_add),
 * keyed by their names in the archive. Jobs live in memory: a restart
 * forgets them, never what they committed. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/internal.h"

#define JOB_CHUNK 256    /* files per patina_index_files call (cancellation points) */
#define JOB_ERRORS 100   /* error messages a job keeps */
#define JOBS_KEPT 1000   /* finished jobs remembered */

enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_FAILED, JOB_CANCELLED };
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
    scoll_t *sc;
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
};

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
            colls_mark_stale(j->sc);
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
    }
    set_state(js, j, atomic_load(&j->cancel) && j->processed < nfiles ? JOB_CANCELLED : JOB_DONE, NULL);
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
    }
    set_state(js, j, atomic_load(&j->cancel) && j->processed < j->nmembers ? JOB_CANCELLED : JOB_DONE, NULL);
}

static void job_free(job_t *j)
{
    size_t i;
    free(j->folder);
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
        if (oldest->folder) run_folder(js, oldest);
        else run_tar(js, oldest);
        pthread_mutex_lock(&js->mu);
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
    }
    pthread_mutex_unlock(&js->mu);
    return NULL;
}

int jobs_start(server_t *srv)
{
    struct jobs *js = calloc(1, sizeof *js);
    if (!js) return -1;
    js->srv = srv;
    js->next_id = 1;
    pthread_mutex_init(&js->mu, NULL);
    pthread_cond_init(&js->cv, NULL);
    if (pthread_create(&js->thread, NULL, jobs_main, js) != 0) {
        free(js);
        return -1;
    }
    srv->jobs = js;
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
        atomic_store(&j->cancel, 1);
        if (j->state == JOB_QUEUED) j->state = JOB_CANCELLED;
    }
    pthread_cond_signal(&js->cv);
    pthread_mutex_unlock(&js->mu);
    pthread_join(js->thread, NULL);
    while ((j = js->all)) {
        js->all = j->next;
        job_free(j);
    }
    pthread_mutex_destroy(&js->mu);
    pthread_cond_destroy(&js->cv);
    free(js);
    srv->jobs = NULL;
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
    return 0;
}

static json_t *job_json(const job_t *j)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer((json_int_t)j->id));
    json_object_set_new(o, "collection", json_string(j->sc->name));
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
