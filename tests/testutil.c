/* Shared test helpers; see testutil.h. */
#define _GNU_SOURCE
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <execinfo.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <turbojpeg.h>

void tu_rng_seed(tu_rng_t *r, uint64_t seed) { r->s = seed * 0x9E3779B97F4A7C15ull + 1; }

uint64_t tu_rng_next(tu_rng_t *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}

uint32_t tu_rng_below(tu_rng_t *r, uint32_t n) { return (uint32_t)((tu_rng_next(r) >> 32) % n); }

static uint8_t clamp8(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

void tu_random_image(patina_image_t *img, int w, int h, int kind, tu_rng_t *r)
{
    int x, y, c;
    int base[3], gx[3], gy[3];
    if (patina_image_init(img, w, h) != PATINA_OK) fail_msg("image_init %dx%d failed", w, h);
    for (c = 0; c < 3; c++) {
        base[c] = (int)tu_rng_below(r, 256);
        gx[c] = (int)tu_rng_below(r, 9) - 4;
        gy[c] = (int)tu_rng_below(r, 9) - 4;
    }
    for (y = 0; y < h; y++)
        for (x = 0; x < w; x++) {
            uint8_t *p = img->data + (size_t)y * img->stride + 3 * (size_t)x;
            switch (kind) {
            case 0:
                for (c = 0; c < 3; c++) p[c] = (uint8_t)tu_rng_below(r, 256);
                break;
            case 1:
                for (c = 0; c < 3; c++)
                    p[c] = clamp8(base[c] + (gx[c] * x + gy[c] * y) / 4 + (int)tu_rng_below(r, 9) - 4);
                break;
            case 2: {
                int cell = ((x / 7) * 31 + (y / 5) * 17) % 5;
                for (c = 0; c < 3; c++) p[c] = clamp8(base[c] + cell * 50 * (c + 1) % 256);
                break;
            }
            default: {
                uint8_t v = clamp8(base[0] + (gx[0] * x + gy[0] * y) / 3 + (int)tu_rng_below(r, 5) - 2);
                p[0] = p[1] = p[2] = v;
            }
            }
        }
}

int tu_write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return -1;
    }
    return fclose(f) == 0 ? 0 : -1;
}

char *tu_table_collection(patina_context_t *ctx, const char *spec, size_t n, int w, int kind, uint64_t seed,
                          uint8_t **descs, size_t *bytes)
{
    char *dir = tu_tempdir("table");
    patina_collection_t *c = NULL;
    patina_extractor_t *ex = NULL;
    patina_image_t *imgs = calloc(n, sizeof *imgs);
    patina_insert_t *items = calloc(n, sizeof *items);
    char (*keys)[32] = calloc(n, sizeof *keys);
    patina_table_descs_t td;
    tu_rng_t r;
    size_t i, b;
    TU_OK(patina_extractor_new(&ex, spec));
    b = patina_extractor_bytes(ex);
    if (bytes) *bytes = b;
    *descs = malloc(n * b);
    tu_rng_seed(&r, seed);
    for (i = 0; i < n; i++) tu_random_image(&imgs[i], w, w, kind, &r);
    TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, *descs, imgs, n, NULL));
    for (i = 0; i < n; i++) {
        snprintf(keys[i], sizeof keys[i], "img/%03zu.jpg", i);
        items[i].key = keys[i];
        items[i].size = 100 + i;
        items[i].sha256[0] = (uint8_t)i;
        items[i].sha256[1] = (uint8_t)(i >> 8);
        items[i].width = items[i].height = w;
        patina_image_release(&imgs[i]);
    }
    td.spec = patina_extractor_spec(ex);
    td.desc_bytes = b;
    td.descs = *descs;
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_CREATE, 0));
    TU_OK(patina_collection_put_tables(c, &td, 1, items, n, NULL));
    patina_collection_close(c);
    free(imgs);
    free(items);
    free(keys);
    patina_extractor_free(ex);
    return dir;
}

char *tu_tempdir(const char *tag)
{
    const char *base = getenv("TMPDIR");
    char *path;
    if (!base || !*base) base = "/tmp";
    if (asprintf(&path, "%s/patina-%s-XXXXXX", base, tag) < 0) return NULL;
    if (!mkdtemp(path)) {
        free(path);
        return NULL;
    }
    return path;
}

const char *tu_find_python(const char *probe, const char *venv)
{
    static char chosen[4096];
    const char *const cands[] = {venv, "/usr/bin/python3", "python3"};
    const char *env = getenv("PATINA_PYTHON");
    if (env && *env) return env;
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++)
        if (cands[i] && tu_run(NULL, "'%s' -c '%s' >/dev/null 2>&1", cands[i], probe) == 0) {
            snprintf(chosen, sizeof chosen, "%s", cands[i]);
            return chosen;
        }
    return NULL;
}

void *tu_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n = -1;
    if (!f) fail_msg("cannot open %s", path);
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) fail_msg("cannot seek %s", path);
    buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) fail_msg("cannot read %s", path);
    fclose(f);
    buf[n] = 0;
    *size = (size_t)n;
    return buf;
}

void tu_remove_tree(const char *path)
{
    char *cmd;
    if (!path || asprintf(&cmd, "rm -rf '%s'", path) < 0) return;
    if (system(cmd) != 0) { /* best effort */ }
    free(cmd);
}

static int has_ext(const char *name, const char *exts)
{
    const char *dot = strrchr(name, '.');
    char buf[256];
    char *tok, *save = NULL;
    if (!dot) return 0;
    snprintf(buf, sizeof buf, "%s", exts);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (!strcasecmp(dot + 1, tok)) return 1;
    return 0;
}

static void walk(const char *dir, const char *exts, char ***out, size_t *n, size_t *cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d) return;
    while ((e = readdir(d))) {
        char *p;
        struct stat st;
        if (e->d_name[0] == '.') continue;
        if (asprintf(&p, "%s/%s", dir, e->d_name) < 0) continue;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            walk(p, exts, out, n, cap);
            free(p);
        } else if (S_ISREG(st.st_mode) && has_ext(e->d_name, exts)) {
            if (*n == *cap) {
                *cap = *cap ? *cap * 2 : 64;
                *out = realloc(*out, *cap * sizeof **out);
            }
            (*out)[(*n)++] = p;
        } else {
            free(p);
        }
    }
    closedir(d);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

size_t tu_list_files(const char *dir, const char *exts, char ***out)
{
    size_t n = 0, cap = 0;
    *out = NULL;
    walk(dir, exts, out, &n, &cap);
    if (n) qsort(*out, n, sizeof **out, cmp_str);
    return n;
}

void tu_free_list(char **list, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) free(list[i]);
    free(list);
}

unsigned char *tu_make_jpeg(unsigned long *size, int w, int h, int kind, int quality, uint64_t seed)
{
    tu_rng_t r;
    patina_image_t img;
    tjhandle c = tjInitCompress();
    unsigned char *buf = NULL;
    tu_rng_seed(&r, seed);
    tu_random_image(&img, w, h, kind, &r);
    if (!c || tjCompress2(c, img.data, w, (int)img.stride, h, TJPF_RGB, &buf, size, TJSAMP_420, quality, 0) != 0)
        fail_msg("tjCompress2: %s", tjGetErrorStr2(c));
    tjDestroy(c);
    patina_image_release(&img);
    return buf;
}

void tu_write_jpeg(const char *path, int w, int h, int kind, int quality, uint64_t seed)
{
    unsigned long size;
    unsigned char *j = tu_make_jpeg(&size, w, h, kind, quality, seed);
    assert_int_equal(tu_write_file(path, j, size), 0);
    tjFree(j);
}

const char *tu_path(const char *dir, const char *fmt, ...)
{
    static char bufs[32][4096];
    static int next;
    char *b = bufs[next++ % 32];
    int n = snprintf(b, sizeof bufs[0], "%s/", dir);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b + n, sizeof bufs[0] - (size_t)n, fmt, ap);
    va_end(ap);
    return b;
}

int tu_run(char **out, const char *fmt, ...)
{
    char *cmd, *buf = NULL;
    size_t len = 0, cap = 0;
    FILE *p;
    int st;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&cmd, fmt, ap) < 0) {
        va_end(ap);
        return -1;
    }
    va_end(ap);
    p = popen(cmd, "r");
    free(cmd);
    if (!p) return -1;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            buf = realloc(buf, cap);
        }
        size_t got = fread(buf + len, 1, 4096, p);
        len += got;
        if (got == 0) break;
    }
    buf[len] = '\0';
    st = pclose(p);
    if (out) *out = buf; else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int tu_drop_privileges(void)
{
    static const int caps[] = {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH};
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    char dir[] = "/tmp/patina-priv-XXXXXX", sub[64];
    DIR *probe;
    size_t i;
    if (geteuid() == 0) {
        if (syscall(SYS_capget, &h, d) != 0) {
            fprintf(stderr, "tu_drop_privileges: capget: %s\n", strerror(errno));
            return -1;
        }
        for (i = 0; i < sizeof caps / sizeof caps[0]; i++) {
            int c = caps[i];
            prctl(PR_CAPBSET_DROP, c, 0, 0, 0); /* needs CAP_SETPCAP; checked below */
            d[c / 32].effective &= ~(1u << (c % 32));
            d[c / 32].permitted &= ~(1u << (c % 32));
            d[c / 32].inheritable &= ~(1u << (c % 32));
        }
        if (syscall(SYS_capset, &h, d) != 0) {
            fprintf(stderr, "tu_drop_privileges: capset: %s\n", strerror(errno));
            return -1;
        }
        for (i = 0; i < sizeof caps / sizeof caps[0]; i++)
            if (prctl(PR_CAPBSET_READ, caps[i], 0, 0, 0) == 1) {
                fprintf(stderr, "tu_drop_privileges: cannot drop capability %d from the bounding set "
                                "(no CAP_SETPCAP): programs run from here would get it back\n", caps[i]);
                return -1;
            }
    }
    /* The proof: a directory with mode 000 must not open. */
    if (!mkdtemp(dir)) return -1;
    snprintf(sub, sizeof sub, "%s/locked", dir);
    mkdir(sub, 0);
    probe = opendir(sub);
    rmdir(sub);
    rmdir(dir);
    if (probe) {
        closedir(probe);
        fprintf(stderr, "tu_drop_privileges: a mode 000 directory still opens (uid %d)\n", (int)geteuid());
        return -1;
    }
    return 0;
}

/* Reads a whole file into a malloc'd NUL-terminated string. */
static char *slurp_fd(int fd, size_t *outlen)
{
    size_t len = 0, cap = 8192;
    char *buf = malloc(cap);
    ssize_t got;
    lseek(fd, 0, SEEK_SET);
    while (buf) {
        if (len + 4096 + 1 > cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        got = read(fd, buf + len, 4096);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        len += (size_t)got;
    }
    if (buf) buf[len] = '\0';
    if (outlen) *outlen = buf ? len : 0;
    return buf;
}

int tu_exec(char **out, char **err, int flags, int timeout_s, const char *const *argv)
{
    return tu_exec_len(out, NULL, err, flags, timeout_s, argv);
}

int tu_exec_len(char **out, size_t *outlen, char **err, int flags, int timeout_s, const char *const *argv)
{
    char opath[] = "/tmp/patina-exec-out-XXXXXX", epath[] = "/tmp/patina-exec-err-XXXXXX";
    int ofd = mkstemp(opath), efd = mkstemp(epath), st = 0, timed_out = 0;
    double waited = 0;
    pid_t pid;
    if (out) *out = NULL;
    if (err) *err = NULL;
    if (ofd < 0 || efd < 0) return -1;
    unlink(opath);
    unlink(epath);
    fflush(NULL);
    pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(ofd, 1);
        dup2(efd, 2);
        if ((flags & TU_UNPRIVILEGED) && tu_drop_privileges() != 0) _exit(254);
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "tu_exec: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    for (;;) {
        pid_t r = waitpid(pid, &st, timeout_s > 0 ? WNOHANG : 0);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) return -1;
        if (timeout_s > 0 && r == 0) {
            if (waited >= timeout_s) {
                kill(pid, SIGKILL);
                timed_out = 1;
                timeout_s = 0; /* now wait for it */
                continue;
            }
            usleep(10000);
            waited += 0.01;
        }
    }
    if (out) *out = slurp_fd(ofd, outlen);
    if (err) *err = slurp_fd(efd, NULL);
    close(ofd);
    close(efd);
    if (timed_out) return 124;
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 254 && (flags & TU_UNPRIVILEGED)) return -2;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void tu_require_gpu(void)
{
    if (patina_gpu_count() == 0) {
        printf("SKIPPED: no usable CUDA GPU on this machine (build info: %s); "
               "run scripts/device.sh on a GPU machine\n", patina_build_info());
        fflush(stdout);
        exit(77);
    }
}

/* A crash's backtrace on stderr, then the signal's default action (a core,
 * the test's exit status). backtrace() is not async-signal-safe by the
 * book; its unwinder is loaded at install time, so in practice it runs.
 * Frames print as MODULE(+OFFSET): addr2line -f -e MODULE OFFSET names them. */
static void crash_handler(int sig)
{
    static const char msg[] = "\n*** crash (signal): backtrace, MODULE(+OFFSET) [ADDRESS] ***\n";
    void *frames[64];
    int n = backtrace(frames, 64);
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    backtrace_symbols_fd(frames, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

void tu_crash_backtrace(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    struct sigaction sa;
    void *f[1];
    (void)backtrace(f, 1);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = crash_handler;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
}

patina_context_t *tu_context(int threads)
{
    patina_context_t *ctx = NULL;
    patina_context_opts_t o;
    patina_context_opts_init(&o);
    o.threads = threads;
    TU_OK(patina_context_new(&ctx, &o));
    return ctx;
}
