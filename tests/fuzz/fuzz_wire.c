/* Fuzz target: the parsers of `patina serve` that read request bytes
 * (src/serve/wire.c): multipart/form-data bodies, tar archives (bulk jobs),
 * header parameters, percent escapes of URL paths, UTF-8 checks and keys as
 * JSON strings.
 *
 * The first byte of an input picks the parser (byte % 5), the rest is its
 * input:
 *   0 multipart  the boundary up to the first '\n' (at most 70 bytes), then
 *                the body
 *   1 tar        the archive, parsed as given and again with every 512-byte
 *                block's checksum field recomputed (else almost every
 *                mutation of a header stops at its checksum)
 *   2 header     a Content-Type value; its boundary= parameter
 *   3 percent    a URL path as a C string
 *   4 utf-8      a key as a C string
 * and checks on every input:
 *   multipart  a refusal leaves no parts and says why; else at most 8 parts,
 *              each named, its bytes inside the body, in order, without the
 *              delimiter "\r\n--boundary" inside and followed by it
 *   tar        the same for members: named, inside the archive, in order,
 *              starting on a block boundary, at most 64
 *   header     a found value is non-empty and fits; without quoted-pairs
 *              in the header it has no quote and occurs in the header
 *   percent    equal to a reference decoder written from RFC 3986 with
 *              isxdigit/strtol (a bad escape and %00 refused); escaping the
 *              result again and decoding gives the result back
 *   utf-8      wire_utf8_valid agrees with a reference validator that decodes
 *              each code point (RFC 3629: no overlong forms, surrogates,
 *              values past U+10FFFF or NUL); wire_json_str gives valid UTF-8,
 *              the key itself when it was valid, and never more than three
 *              bytes per input byte
 * Parsing is also repeated, and must give the same result (no state). */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "serve/internal.h"

#define MAX_PARTS 8
#define MAX_MEMBERS 64
#define TEXT_MAX 4096

static char g_err[256];

/* ------------------------------------------------------------ references */

/* Decodes %XX escapes as RFC 3986 reads them; -1 for a '%' not followed by
 * two hex digits, and for %00 (a NUL cannot be in a C string). */
static int ref_percent(const char *in, char *out)
{
    size_t i = 0, o = 0;
    while (in[i]) {
        if (in[i] != '%') {
            out[o++] = in[i++];
            continue;
        }
        if (!isxdigit((unsigned char)in[i + 1]) || !isxdigit((unsigned char)in[i + 2])) return -1;
        char hex[3] = {in[i + 1], in[i + 2], '\0'};
        long v = strtol(hex, NULL, 16);
        if (v == 0) return -1;
        out[o++] = (char)v;
        i += 3;
    }
    out[o] = '\0';
    return 0;
}

/* 1 when s[0..n) is UTF-8 by RFC 3629 without NUL: each sequence decoded to
 * its code point, which must need exactly that many bytes, be no surrogate
 * and at most U+10FFFF. */
static int ref_utf8(const unsigned char *s, size_t n)
{
    static const unsigned long min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len, k;
        unsigned long cp;
        if (c == 0) return 0;
        if (c < 0x80) len = 1, cp = c;
        else if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
        else return 0;
        if (len > n - i) return 0;
        for (k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
}

/* ------------------------------------------------------------- parsers */

static void check_multipart(const uint8_t *data, size_t size)
{
    char boundary[71];
    const uint8_t *nl = memchr(data, '\n', size < 71 ? size : 71);
    size_t bl = nl ? (size_t)(nl - data) : 0, n = 0, n2 = 0, i;
    wire_part_t *parts = NULL, *parts2 = NULL;
    const uint8_t *body, *prev_end;
    char delim[80];
    size_t dl;
    int r;

    if (!nl) return;
    memcpy(boundary, data, bl);
    boundary[bl] = '\0'; /* a NUL inside cuts it, like a C string header would */
    body = nl + 1;
    size -= bl + 1;
    g_err[0] = '\0';
    r = wire_multipart_parse(&parts, &n, body, size, boundary, MAX_PARTS, g_err, sizeof g_err);
    if (r != 0) {
        FUZZ_CHECK(r == -1, "multipart returned %d", r);
        FUZZ_CHECK(!parts && n == 0, "a refused body left %zu parts", n);
        FUZZ_CHECK(g_err[0] != '\0', "a refused body without a message");
        return;
    }
    FUZZ_CHECK(*boundary != '\0', "a body accepted with an empty boundary");
    FUZZ_CHECK(n <= MAX_PARTS, "%zu parts over the limit %d", n, MAX_PARTS);
    dl = (size_t)snprintf(delim, sizeof delim, "\r\n--%s", boundary);
    prev_end = body;
    for (i = 0; i < n; i++) {
        const wire_part_t *p = &parts[i];
        FUZZ_CHECK(p->name != NULL, "part %zu without a name", i);
        FUZZ_CHECK(p->data >= prev_end && p->data <= body + size && p->size <= (size_t)(body + size - p->data),
                   "part %zu outside the body or out of order", i);
        FUZZ_CHECK(!memmem(p->data, p->size, delim, dl), "part %zu holds the delimiter", i);
        FUZZ_CHECK(dl <= (size_t)(body + size - (p->data + p->size)) && !memcmp(p->data + p->size, delim, dl),
                   "part %zu not followed by the delimiter", i);
        prev_end = p->data + p->size + dl;
    }
    r = wire_multipart_parse(&parts2, &n2, body, size, boundary, MAX_PARTS, g_err, sizeof g_err);
    FUZZ_CHECK(r == 0 && n2 == n, "a second parse differs");
    for (i = 0; i < n; i++)
        FUZZ_CHECK(parts2[i].data == parts[i].data && parts2[i].size == parts[i].size &&
                       !strcmp(parts2[i].name, parts[i].name),
                   "a second parse differs at part %zu", i);
    wire_parts_free(parts, n);
    wire_parts_free(parts2, n2);
}

static void check_tar_once(const uint8_t *tar, size_t size)
{
    wire_tar_member_t *m = NULL;
    size_t n = 0, i;
    const uint8_t *prev_end = tar;
    int r;
    g_err[0] = '\0';
    r = wire_tar_parse(&m, &n, tar, size, MAX_MEMBERS, g_err, sizeof g_err);
    if (r != 0) {
        FUZZ_CHECK(r == -1, "tar returned %d", r);
        FUZZ_CHECK(!m && n == 0, "a refused archive left %zu members", n);
        FUZZ_CHECK(g_err[0] != '\0', "a refused archive without a message");
        return;
    }
    FUZZ_CHECK(n <= MAX_MEMBERS, "%zu members over the limit %d", n, MAX_MEMBERS);
    for (i = 0; i < n; i++) {
        FUZZ_CHECK(m[i].name != NULL, "member %zu without a name", i);
        FUZZ_CHECK(m[i].data >= prev_end + 512 && m[i].data <= tar + size &&
                       m[i].size <= (size_t)(tar + size - m[i].data),
                   "member %zu outside the archive or out of order", i);
        FUZZ_CHECK((m[i].data - tar) % 512 == 0, "member %zu does not start on a block", i);
        prev_end = m[i].data + m[i].size;
    }
    wire_tar_free(m, n);
}

static void check_tar(const uint8_t *data, size_t size)
{
    uint8_t *copy;
    size_t off;
    check_tar_once(data, size);
    if (size < 512 || !(copy = malloc(size))) return;
    memcpy(copy, data, size);
    for (off = 0; off + 512 <= size; off += 512) {
        uint8_t *h = copy + off;
        unsigned long sum = 0;
        size_t i;
        char field[9];
        memset(h + 148, ' ', 8);
        for (i = 0; i < 512; i++) sum += h[i];
        snprintf(field, sizeof field, "%06lo", sum & 0777777);
        memcpy(h + 148, field, 7); /* six digits, NUL, then the space already there */
    }
    check_tar_once(copy, size);
    free(copy);
}

static void check_header(const char *value)
{
    char out[71];
    if (wire_header_param(value, "boundary", out, sizeof out) != 0) return;
    FUZZ_CHECK(out[0] != '\0' && strlen(out) < sizeof out, "an empty or unterminated parameter");
    if (!strchr(value, '\\')) { /* no quoted-pairs: the value is a piece of the header, quote-free */
        FUZZ_CHECK(!strchr(out, '"'), "a quote in the parameter '%s'", out);
        FUZZ_CHECK(strstr(value, out) != NULL, "the parameter '%s' is not in the header", out);
    }
}

static void check_percent(const char *in)
{
    static char got[TEXT_MAX + 1], want[TEXT_MAX + 1], again[3 * TEXT_MAX + 1];
    size_t i, o = 0;
    int r, rr;
    strcpy(got, in);
    r = wire_percent_decode(got);
    rr = ref_percent(in, want);
    FUZZ_CHECK(r == rr, "percent decoding returned %d, the reference %d", r, rr);
    if (r != 0) return;
    FUZZ_CHECK(!strcmp(got, want), "percent decoding differs from the reference");
    again[0] = '\0';
    for (i = 0; got[i]; i++) o += (size_t)sprintf(again + o, "%%%02X", (unsigned char)got[i]);
    FUZZ_CHECK(wire_percent_decode(again) == 0 && !strcmp(again, got), "escaping and decoding is not the identity");
}

static void check_utf8(const char *s)
{
    size_t len = strlen(s);
    int v = wire_utf8_valid(s, len), rv = ref_utf8((const unsigned char *)s, len);
    json_t *j;
    const char *js;
    size_t jl;
    FUZZ_CHECK(v == rv, "wire_utf8_valid says %d, the reference %d", v, rv);
    j = wire_json_str(s);
    FUZZ_CHECK(j != NULL, "no JSON string");
    js = json_string_value(j);
    jl = json_string_length(j);
    FUZZ_CHECK(ref_utf8((const unsigned char *)js, jl), "the JSON string is not valid UTF-8");
    FUZZ_CHECK(jl <= 3 * len, "the JSON string grew past three bytes a byte");
    if (v) FUZZ_CHECK(jl == len && !memcmp(js, s, len), "a valid key was changed");
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char text[TEXT_MAX + 1];
    size_t n;
    if (size == 0) return 0;
    n = size - 1 < TEXT_MAX ? size - 1 : TEXT_MAX;
    memcpy(text, data + 1, n);
    text[n] = '\0';
    switch (data[0] % 5) {
    case 0: check_multipart(data + 1, size - 1); break;
    case 1: check_tar(data + 1, size - 1); break;
    case 2: check_header(text); break;
    case 3: check_percent(text); break;
    default: check_utf8(text); break;
    }
    return 0;
}

/* ----------------------------------------------------------------- seeds */

/* Seeds carry the selector byte first. */
static void seed(fuzz_seeds_t *w, const char *name, int which, const void *data, size_t size)
{
    uint8_t *b = malloc(size + 1);
    if (!b) return;
    b[0] = (uint8_t)which;
    memcpy(b + 1, data, size);
    fuzz_seed(w, name, b, size + 1);
    free(b);
}

static void seed_str(fuzz_seeds_t *w, const char *name, int which, const char *s)
{
    seed(w, name, which, s, strlen(s));
}

/* A ustar header for a regular file (or `type`) of `size` bytes, checksum set. */
static void tar_header(uint8_t h[512], const char *name, size_t size, char type)
{
    unsigned long sum = 0;
    size_t i;
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    memcpy(h + 100, "0000644", 7);
    snprintf((char *)h + 124, 12, "%011zo", size);
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar\0" "00", 8);
    memset(h + 148, ' ', 8);
    for (i = 0; i < 512; i++) sum += h[i];
    snprintf((char *)h + 148, 8, "%06lo", sum);
}

void fuzz_write_seeds(fuzz_seeds_t *w)
{
    static const char *dict[] = {"--", "\r\n", "\r\n\r\n", "Content-Disposition: form-data; name=",
                                 "filename=\"", "Content-Type: ", "multipart/form-data; boundary=", "ustar",
                                 "ustar  ", "path=", "%00", "%2F", "%25", "%zz", "\xC0\x80", "\xED\xA0\x80",
                                 "\xF4\x90\x80\x80", "\xEF\xBF\xBD"};
    static const char mp[] = "XyZ\n"
                             "preamble\r\n--XyZ\r\n"
                             "Content-Disposition: form-data; name=\"image\"; filename=\"a.jpg\"\r\n"
                             "Content-Type: image/jpeg\r\n\r\n\xFF\xD8\xFF\xE0 bytes\r\n"
                             "--XyZ\r\nContent-Disposition: form-data; name=k\r\n\r\n10\r\n--XyZ--\r\n";
    uint8_t tar[512 * 8];
    size_t i;
    /* multipart: two parts after a preamble; truncated; a part without
     * headers; no closing boundary */
    seed(w, "multipart", 0, mp, sizeof mp - 1);
    seed(w, "multipart-truncated", 0, mp, sizeof mp - 20);
    seed_str(w, "multipart-noheaders", 0, "b\n--b\r\n\r\ndata\r\n--b--");
    seed_str(w, "multipart-unclosed", 0, "b\n--b\r\nContent-Disposition: form-data; name=x\r\n\r\ndata");
    /* tar: a file; a GNU long name; a pax path; a base-256 size;
     * truncated */
    memset(tar, 0, sizeof tar);
    tar_header(tar, "a.ppm", 3, '0');
    memcpy(tar + 512, "P6\n", 3);
    tar_header(tar + 1024, "././@LongLink", 20, 'L');
    memcpy(tar + 1536, "some/very/long/name\0", 20);
    tar_header(tar + 2048, "short", 1, '0');
    tar_header(tar + 3072, "pax", 22, 'x');
    memcpy(tar + 3584, "22 path=from/pax.jpeg\n", 22);
    seed(w, "tar", 1, tar, sizeof tar);
    seed(w, "tar-truncated", 1, tar, 700);
    tar[124] = 0x80; /* GNU base-256 size */
    seed(w, "tar-base256", 1, tar, sizeof tar);
    /* header parameters */
    seed_str(w, "header", 2, "multipart/form-data; boundary=----a1b2");
    seed_str(w, "header-quoted", 2, "multipart/form-data; charset=utf-8; boundary=\"x y\"");
    seed_str(w, "header-unclosed", 2, "multipart/form-data; boundary=\"abc");
    /* percent escapes */
    seed_str(w, "percent", 3, "/v1/collections/photos/images/a%2Fb%20c.jpg");
    seed_str(w, "percent-bad", 3, "/x%zz%0");
    seed_str(w, "percent-nul", 3, "/x%00y");
    /* UTF-8 */
    seed_str(w, "utf8", 4, "caf\xC3\xA9/\xE6\x97\xA5\xF0\x9F\x98\x80.jpg");
    seed_str(w, "utf8-bad", 4, "a\xC0\x80" "b\xED\xA0\x80" "c\xF4\x90\x80\x80" "d\xFF\xC3");
    for (i = 0; i < sizeof dict / sizeof *dict; i++) fuzz_dict_str(w, dict[i]);
}
