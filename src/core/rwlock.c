/* The library's reader-writer locks (search indexes, pivot tables). */
#define _GNU_SOURCE /* glibc: pthread_rwlockattr_setkind_np */
#include <pthread.h>

#include "core/internal.h"

/* Prefers writers where the C library can (glibc): a stream of searches
 * does not starve a change; nothing takes such a lock twice. */
int patina__rwlock_init(pthread_rwlock_t *l)
{
#ifdef __GLIBC__
    pthread_rwlockattr_t a;
    int rc;
    if (pthread_rwlockattr_init(&a) != 0) return -1;
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    rc = pthread_rwlock_init(l, &a);
    pthread_rwlockattr_destroy(&a);
    return rc;
#else
    return pthread_rwlock_init(l, NULL);
#endif
}
