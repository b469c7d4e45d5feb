/* A small fixed thread pool with one operation: run fn over [0, n) with
 * dynamic scheduling (an atomic counter), the caller taking part. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT_S */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"

struct patina_pool {
    int size;                 /* workers including the caller */
    pthread_t *threads;       /* size - 1 */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t generation;      /* bumped per run */
    int stopping;
    int active;               /* helpers still in the current run */
    /* the current job */
    patina_task_fn fn;
    void *arg;
    size_t n;
    atomic_size_t next;
};

/* CPUs in the calling thread's affinity mask (taskset, a container's
 * cpuset), 0 when it cannot be read. */
static int affinity_count(void)
{
    for (int cpus = 1024; cpus <= (1 << 16); cpus *= 4) {
        cpu_set_t *set = CPU_ALLOC((size_t)cpus);
        const size_t size = CPU_ALLOC_SIZE((size_t)cpus);
        int n = 0;
        if (!set) return 0;
        if (sched_getaffinity(0, size, set) == 0) n = CPU_COUNT_S(size, set);
        else n = -1; /* EINVAL: a larger set is needed */
        CPU_FREE(set);
        if (n >= 0) return n;
    }
    return 0;
}

/* The cgroup v2 CPU quota of the process's cgroup as the container sees it
 * (/sys/fs/cgroup/cpu.max: "QUOTA PERIOD" or "max PERIOD"), rounded up to
 * whole CPUs; 0 without a quota. */
static int quota_count(void)
{
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    char q[32] = "";
    long long period = 0;
    int n = 0;
    if (!f) return 0;
    if (fscanf(f, "%31s %lld", q, &period) == 2 && period > 0 && q[0] >= '0' && q[0] <= '9') {
        const long long quota = atoll(q);
        if (quota > 0) n = (int)((quota + period - 1) / period);
    }
    fclose(f);
    return n;
}

int patina_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    int a = affinity_count(), q = quota_count();
    if (a > 0 && a < n) n = a;
    if (q > 0 && q < n) n = q;
    return n < 1 ? 1 : (int)n;
}

double patina_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void drain(patina_pool_t *p, int worker)
{
    for (;;) {
        size_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->n) break;
        p->fn(p->arg, i, worker);
    }
}

typedef struct { patina_pool_t *pool; int id; } worker_arg_t;

static void *worker_main(void *v)
{
    worker_arg_t *wa = v;
    patina_pool_t *p = wa->pool;
    int id = wa->id;
    uint64_t seen = 0;
    free(wa);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stopping && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stopping) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        drain(p, id);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

patina_status patina_pool_new(patina_pool_t **pool, int threads)
{
    patina_pool_t *p;
    int i;
    *pool = NULL;
    if (threads <= 0) threads = patina_cpu_count();
    if (threads > 1024) return patina__fail(PATINA_E_INVALID, "pool: %d threads is too many (max 1024)", threads);
    p = calloc(1, sizeof *p);
    if (!p) return patina__fail(PATINA_E_NOMEM, "pool: out of memory");
    p->size = threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)threads, sizeof *p->threads);
    if (!p->threads) {
        patina_pool_free(p);
        return patina__fail(PATINA_E_NOMEM, "pool: out of memory");
    }
    for (i = 1; i < threads; i++) {
        worker_arg_t *wa = malloc(sizeof *wa);
        if (wa) {               /* filled before the thread can read it */
            wa->pool = p;
            wa->id = i;
        }
        if (!wa || pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            p->size = i;  /* the ones started so far */
            patina_pool_free(p);
            return patina__fail(PATINA_E_NOMEM, "pool: cannot start thread %d", i);
        }
    }
    *pool = p;
    return PATINA_OK;
}

void patina_pool_free(patina_pool_t *p)
{
    int i;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (i = 1; i < p->size && p->threads; i++)
        pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

int patina_pool_size(const patina_pool_t *p) { return p ? p->size : 1; }

void patina_pool_run(patina_pool_t *p, size_t n, patina_task_fn fn, void *arg)
{
    size_t i;
    if (n == 0) return;
    if (!p || p->size == 1 || n == 1) {
        for (i = 0; i < n; i++) fn(arg, i, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    atomic_store(&p->next, 0);
    p->active = p->size - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    drain(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->active > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
