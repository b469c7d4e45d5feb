/* Pure parsers and writers of `patina serve` (see internal.h): multipart
 * bodies, tar archives, header parameters, percent escapes, strings for
 * JSON. No I/O and no global state: every input is bounded by its length,
 * so they take any bytes (a fuzzer's included). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "serve/internal.h"

static const uint8_t *find(const uint8_t *h, size_t hn, const char *needle, size_t nn)
{
    return nn > hn ? NULL : memmem(h, hn, needle, nn);
}

int wire_header_param(const char *value, const char *param, char *out, size_t size)
{
    size_t pl = strlen(param);
    const char *p = value ? strchr(value, ';') : NULL; /* past the media type */
    /* each "; name=value": the value a token or a quoted-string (RFC 9110
     * 5.6.6), walked whole so that a ';' or "boundary=" inside another
     * parameter's quotes is not taken for a parameter */
    while (p && *p == ';') {
        const char *name = p + 1 + strspn(p + 1, " \t");
        size_t nl = strcspn(name, "=; \t"), n = 0;
        int match = nl == pl && !strncasecmp(name, param, pl), bad = 0;
        p = name + nl;
        if (*p != '=') {
            p = strchr(p, ';');
            continue;
        }
        p++;
        if (*p == '"') {
            for (p++; *p && *p != '"'; p++, n++) {
                if (*p == '\\' && p[1]) p++; /* a quoted-pair */
                if (match && n + 1 < size) out[n] = *p;
            }
            if (*p != '"') return -1; /* unterminated */
            p++;
        } else {
            for (; *p && *p != ';' && *p != ' ' && *p != '\t'; p++, n++) {
                if (*p == '"') bad = 1; /* a quote cannot be in a token */
                if (match && n + 1 < size) out[n] = *p;
            }
        }
        if (match) {
            if (bad || n == 0 || n >= size) return -1;
            out[n] = '\0';
            return 0;
        }
        p = strchr(p, ';');
    }
    return -1;
}

void wire_parts_free(wire_part_t *parts, size_t n)
{
    size_t i;
    for (i = 0; parts && i < n; i++) {
        free(parts[i].name);
        free(parts[i].filename);
        free(parts[i].content_type);
    }
    free(parts);
}

/* A NUL-terminated copy of [s, s + n). */
static char *dupn(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* The parameter's value in a Content-Disposition line (quoted or bare). */
static char *disp_param(const char *line, size_t len, const char *param)
{
    size_t pl = strlen(param), i;
    for (i = 0; i + pl + 1 < len; i++) {
        if ((i == 0 || line[i - 1] == ';' || line[i - 1] == ' ' || line[i - 1] == '\t') &&
            !strncasecmp(line + i, param, pl) && line[i + pl] == '=') {
            const char *v = line + i + pl + 1, *end = line + len, *e;
            if (v < end && *v == '"') {
                v++;
                e = memchr(v, '"', (size_t)(end - v));
                if (!e) return NULL;
            } else {
                e = v;
                while (e < end && *e != ';' && *e != ' ' && *e != '\t') e++;
            }
            return dupn(v, (size_t)(e - v));
        }
    }
    return NULL;
}

int wire_multipart_parse(wire_part_t **parts, size_t *nparts, const uint8_t *body, size_t size,
                         const char *boundary, size_t max_parts, char *err, size_t errsize)
{
    char delim[256];
    size_t dl, n = 0, cap = 0;
    wire_part_t *v = NULL, part; /* part: the one being read (its strings freed on failure) */
    const uint8_t *p, *end = body + size;
    memset(&part, 0, sizeof part);
    *parts = NULL;
    *nparts = 0;
    if (!boundary || !*boundary || strlen(boundary) > 200) {
        snprintf(err, errsize, "multipart body without a usable boundary parameter");
        return -1;
    }
    dl = (size_t)snprintf(delim, sizeof delim, "--%s", boundary);
    /* the first delimiter: at the start or after a preamble line */
    if (size >= dl && !memcmp(body, delim, dl)) {
        p = body + dl;
    } else {
        char d2[260];
        size_t l2 = (size_t)snprintf(d2, sizeof d2, "\r\n%s", delim);
        const uint8_t *q = find(body, size, d2, l2);
        if (!q) {
            snprintf(err, errsize, "multipart body without its boundary '%s'", boundary);
            return -1;
        }
        p = q + l2;
    }
    for (;;) {
        const uint8_t *hdr_end, *next, *line;
        char d2[260];
        size_t l2;
        /* after a delimiter: "--" ends the body, else CRLF starts a part */
        if (end - p >= 2 && p[0] == '-' && p[1] == '-') break;
        while (p < end && (*p == ' ' || *p == '\t')) p++;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n') {
            snprintf(err, errsize, "multipart body truncated or malformed after a boundary");
            goto fail;
        }
        p += 2;
        hdr_end = find(p, (size_t)(end - p), "\r\n\r\n", 4);
        /* a part without headers starts with the blank line itself */
        if (end - p >= 2 && p[0] == '\r' && p[1] == '\n') hdr_end = p - 2;
        if (!hdr_end) {
            snprintf(err, errsize, "multipart part without the blank line after its headers (truncated body?)");
            goto fail;
        }
        for (line = p; line < hdr_end;) {
            const uint8_t *le = find(line, (size_t)(hdr_end + 2 - line), "\r\n", 2);
            size_t ll;
            if (!le) le = hdr_end;
            ll = (size_t)(le - line);
            if (ll > 20 && !strncasecmp((const char *)line, "Content-Disposition:", 20)) {
                free(part.name);
                free(part.filename);
                part.name = disp_param((const char *)line + 20, ll - 20, "name");
                part.filename = disp_param((const char *)line + 20, ll - 20, "filename");
            } else if (ll > 13 && !strncasecmp((const char *)line, "Content-Type:", 13)) {
                const char *s = (const char *)line + 13;
                size_t sl = ll - 13;
                while (sl && (*s == ' ' || *s == '\t')) s++, sl--;
                free(part.content_type);
                part.content_type = dupn(s, sl);
            }
            line = le + 2;
        }
        p = hdr_end + 4;
        l2 = (size_t)snprintf(d2, sizeof d2, "\r\n%s", delim);
        next = p <= end ? find(p, (size_t)(end - p), d2, l2) : NULL;
        if (!next) {
            snprintf(err, errsize, "multipart body truncated: no closing boundary");
            goto fail;
        }
        part.data = p;
        part.size = (size_t)(next - p);
        if (!part.name) {
            snprintf(err, errsize, "multipart part %zu has no Content-Disposition name", n + 1);
            goto fail;
        }
        if (n == max_parts) {
            snprintf(err, errsize, "more than %zu multipart parts", max_parts);
            goto fail;
        }
        if (n == cap) {
            wire_part_t *t = realloc(v, (cap = cap ? 2 * cap : 4) * sizeof *v);
            if (!t) {
                snprintf(err, errsize, "out of memory");
                goto fail;
            }
            v = t;
        }
        v[n++] = part;
        memset(&part, 0, sizeof part); /* v owns its strings now */
        p = next + l2;
    }
    *parts = v;
    *nparts = n;
    return 0;
fail:
    free(part.name);
    free(part.filename);
    free(part.content_type);
    wire_parts_free(v, n);
    return -1;
}

/* ------------------------------------------------------------------- tar */

static uint64_t tar_octal(const uint8_t *p, size_t n, int *ok)
{
    uint64_t v = 0;
    size_t i = 0;
    if (n && (p[0] & 0x80)) { /* GNU base-256 */
        for (i = 1; i < n; i++) {
            if (v >> 55) {
                *ok = 0;
                return 0;
            }
            v = v << 8 | p[i];
        }
        return v;
    }
    while (i < n && p[i] == ' ') i++;
    for (; i < n && p[i] >= '0' && p[i] <= '7'; i++) {
        if (v >> 60) {
            *ok = 0;
            return 0;
        }
        v = v * 8 + (uint64_t)(p[i] - '0');
    }
    for (; i < n; i++)
        if (p[i] != ' ' && p[i] != '\0') *ok = 0;
    return v;
}

void wire_tar_free(wire_tar_member_t *m, size_t n)
{
    size_t i;
    for (i = 0; m && i < n; i++) free(m[i].name);
    free(m);
}

/* pax "len path=value\n" records: the path, or NULL. `len` counts the whole
 * record, its digits, space and newline included; a record shorter than its
 * own length field or not ending in a newline ends the walk. */
static char *pax_path(const uint8_t *p, size_t n)
{
    size_t off = 0;
    while (off < n) {
        size_t len = 0, i = off, end;
        while (i < n && p[i] >= '0' && p[i] <= '9' && len <= n) len = len * 10 + (size_t)(p[i++] - '0');
        if (i >= n || p[i] != ' ' || len == 0 || len > n - off) return NULL;
        i++;
        end = off + len; /* "key=value\n" is [i, end) */
        if (end <= i || p[end - 1] != '\n') return NULL;
        if (end - i >= 6 && !memcmp(p + i, "path=", 5)) return dupn((const char *)p + i + 5, end - i - 6);
        off = end;
    }
    return NULL;
}

int wire_tar_parse(wire_tar_member_t **members, size_t *nm, const uint8_t *tar, size_t size, size_t max_members,
                   char *err, size_t errsize)
{
    size_t off = 0, n = 0, cap = 0;
    wire_tar_member_t *v = NULL;
    char *longname = NULL;
    *members = NULL;
    *nm = 0;
    while (off + 512 <= size) {
        const uint8_t *h = tar + off;
        uint64_t fsize, sum, want = 0;
        int ok = 1;
        size_t i;
        char type;
        if (h[0] == 0) { /* two zero blocks end the archive; one is enough for us */
            int zero = 1;
            for (i = 0; i < 512 && zero; i++) zero = h[i] == 0;
            if (zero) break;
        }
        for (i = 0; i < 512; i++) want += (i >= 148 && i < 156) ? ' ' : h[i];
        sum = tar_octal(h + 148, 8, &ok);
        fsize = tar_octal(h + 124, 12, &ok);
        if (!ok || sum != want) {
            snprintf(err, errsize, "tar: bad header at offset %zu (checksum or size field)", off);
            goto fail;
        }
        type = (char)h[156];
        off += 512;
        if (fsize > size - off) {
            snprintf(err, errsize, "tar: member at offset %zu declares %llu bytes, past the end of the archive",
                     off - 512, (unsigned long long)fsize);
            goto fail;
        }
        if (type == 'L') { /* GNU long name: the next header's name */
            free(longname);
            longname = dupn((const char *)tar + off, (size_t)fsize);
        } else if (type == 'x') {
            char *pp = pax_path(tar + off, (size_t)fsize);
            if (pp) {
                free(longname);
                longname = pp;
            }
        } else if (type == '0' || type == '\0' || type == '7') {
            char name[256 + 1 + 100 + 1];
            wire_tar_member_t m;
            if (longname) {
                m.name = longname;
                longname = NULL;
            } else {
                size_t pl = strnlen((const char *)h + 345, 155), nl = strnlen((const char *)h, 100);
                if (!memcmp(h + 257, "ustar", 5) && pl) {
                    memcpy(name, h + 345, pl);
                    name[pl] = '/';
                    memcpy(name + pl + 1, h, nl);
                    name[pl + 1 + nl] = '\0';
                } else {
                    memcpy(name, h, nl);
                    name[nl] = '\0';
                }
                m.name = strdup(name);
            }
            if (!m.name) {
                snprintf(err, errsize, "out of memory");
                goto fail;
            }
            m.data = tar + off;
            m.size = (size_t)fsize;
            if (n == max_members) {
                free(m.name);
                snprintf(err, errsize, "tar: more than %zu files", max_members);
                goto fail;
            }
            if (n == cap) {
                wire_tar_member_t *t = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof *v);
                if (!t) {
                    free(m.name);
                    snprintf(err, errsize, "out of memory");
                    goto fail;
                }
                v = t;
            }
            v[n++] = m;
        } else {
            free(longname); /* a long name belongs to the entry after it only */
            longname = NULL;
        }
        off += (size_t)((fsize + 511) / 512 * 512 > size - off ? size - off : (fsize + 511) / 512 * 512);
    }
    if (off + 512 > size && off != size && n == 0) {
        snprintf(err, errsize, "tar: archive truncated (%zu bytes is not a whole header)", size - off);
        goto fail;
    }
    free(longname);
    *members = v;
    *nm = n;
    return 0;
fail:
    free(longname);
    wire_tar_free(v, n);
    return -1;
}

/* ------------------------------------------------------------------ text */

/* Length of the valid UTF-8 sequence at p (within n bytes), 0 when none. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return n >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return n >= 3 && p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return n >= 4 && p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

int wire_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        size_t k = p[i] ? utf8_seq(p + i, len - i) : 0;
        if (!k) return 0;
        i += k;
    }
    return 1;
}

json_t *wire_json_str(const char *s)
{
    size_t len = strlen(s), i = 0, o = 0;
    char *buf;
    json_t *j;
    if (wire_utf8_valid(s, len)) return json_stringn(s, len);
    buf = malloc(3 * len + 1);
    if (!buf) return NULL;
    while (i < len) {
        size_t k = utf8_seq((const unsigned char *)s + i, len - i);
        if (k) {
            memcpy(buf + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(buf + o, "\xEF\xBF\xBD", 3); /* U+FFFD */
            o += 3;
            i++;
        }
    }
    j = json_stringn(buf, o);
    free(buf);
    return j;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int wire_percent_decode(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (*s == '%') {
            int h = hexval((unsigned char)s[1]), l = h < 0 ? -1 : hexval((unsigned char)s[2]);
            if (h < 0 || l < 0 || (h | l) == 0) return -1;
            *o++ = (char)(h * 16 + l);
            s += 2;
        } else {
            *o++ = *s;
        }
    }
    *o = '\0';
    return 0;
}

void wire_video(json_t *h, const char *key)
{
    int64_t t, frame;
    size_t len;
    char *file;
    json_t *v;
    if (!key || !patina_video_key_parse(key, &t, &frame, &len) || !(file = strndup(key, len))) return;
    v = json_object();
    json_object_set_new(v, "file", wire_json_str(file));
    json_object_set_new(v, "t", json_real((double)t / 1000.0));
    json_object_set_new(v, "frame", json_integer((json_int_t)frame));
    json_object_set_new(h, "video", v);
    free(file);
}
