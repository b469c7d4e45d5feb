/* Unit tests of src/serve/wire.c, the HTTP server's pure parsers:
 * multipart/form-data bodies (whole, with a preamble, truncated at every
 * byte, without names), header parameters, tar archives (ustar, GNU long
 * names, bad checksums, sizes past the end, truncated at every byte),
 * percent escapes and UTF-8 checks. Every prefix of a valid input must
 * parse or fail cleanly (ASan builds check the bounds). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "serve/internal.h"

static const char body[] = "preamble\r\n"
                           "--XyZ\r\n"
                           "Content-Disposition: form-data; name=\"key\"\r\n\r\n"
                           "a/b.jpg\r\n"
                           "--XyZ\r\n"
                           "Content-Disposition: form-data; name=\"image\"; filename=\"x.jpg\"\r\n"
                           "Content-Type: image/jpeg\r\n\r\n"
                           "\xff\xd8--XyZ-not-a-boundary\r\n\r\n"
                           "--XyZ--\r\n";

static void test_multipart(void **state)
{
    wire_part_t *p = NULL;
    size_t n = 0, len = sizeof body - 1, cut;
    char err[256];
    (void)state;
    assert_int_equal(wire_multipart_parse(&p, &n, (const uint8_t *)body, len, "XyZ", 64, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(p[0].name, "key");
    assert_null(p[0].filename);
    assert_int_equal(p[0].size, 7);
    assert_memory_equal(p[0].data, "a/b.jpg", 7);
    assert_string_equal(p[1].name, "image");
    assert_string_equal(p[1].filename, "x.jpg");
    assert_string_equal(p[1].content_type, "image/jpeg");
    assert_int_equal(p[1].size, 2 + 20 + 2); /* the data holds a near-boundary and a CRLF of its own */
    wire_parts_free(p, n);
    /* every truncation fails cleanly (the closing "--XyZ--" is needed) */
    for (cut = 0; cut < len - 4; cut++) {
        char *copy = malloc(cut ? cut : 1);
        memcpy(copy, body, cut);
        p = NULL;
        if (wire_multipart_parse(&p, &n, (const uint8_t *)copy, cut, "XyZ", 64, err, sizeof err) == 0) {
            /* only a cut inside the final "--\r\n" may still parse */
            assert_true(cut >= len - 4);
            wire_parts_free(p, n);
        }
        free(copy);
    }
    assert_int_equal(wire_multipart_parse(&p, &n, (const uint8_t *)body, len, "other", 64, err, sizeof err), -1);
    assert_int_equal(wire_multipart_parse(&p, &n, (const uint8_t *)body, len, "XyZ", 1, err, sizeof err), -1);
    {
        static const char noname[] = "--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--\r\n";
        assert_int_equal(wire_multipart_parse(&p, &n, (const uint8_t *)noname, sizeof noname - 1, "b", 64, err, sizeof err), -1);
    }
}

static void test_header_param(void **state)
{
    char out[64];
    (void)state;
    assert_int_equal(wire_header_param("multipart/form-data; boundary=abc", "boundary", out, sizeof out), 0);
    assert_string_equal(out, "abc");
    assert_int_equal(wire_header_param("multipart/form-data;boundary=\"a b\"; x=1", "boundary", out, sizeof out), 0);
    assert_string_equal(out, "a b");
    assert_int_equal(wire_header_param("multipart/form-data", "boundary", out, sizeof out), -1);
    assert_int_equal(wire_header_param("multipart/form-data; boundary=\"unterminated", "boundary", out, sizeof out), -1);
    assert_int_equal(wire_header_param("multipart/form-data; boundary=", "boundary", out, sizeof out), -1);
    /* a ';' and "boundary=" inside another parameter's quotes are its value */
    assert_int_equal(wire_header_param("multipart/form-data; x=\"a;boundary=evil\"; boundary=good", "boundary", out,
                                       sizeof out), 0);
    assert_string_equal(out, "good");
    /* names match whole: "xboundary" is another parameter */
    assert_int_equal(wire_header_param("multipart/form-data; xboundary=a", "boundary", out, sizeof out), -1);
    /* a quoted-pair; a quote inside a bare value is malformed (found by fuzz_wire) */
    assert_int_equal(wire_header_param("multipart/form-data; boundary=\"a\\\"b\"", "boundary", out, sizeof out), 0);
    assert_string_equal(out, "a\"b");
    assert_int_equal(wire_header_param("multipart/form-data; boundary=++\"abc", "boundary", out, sizeof out), -1);
    /* a value that does not fit */
    assert_int_equal(wire_header_param("multipart/form-data; boundary=0123456789012345678901234567890123456789"
                                       "012345678901234567890123456789", "boundary", out, sizeof out), -1);
}

/* A ustar header for a regular file `name` of `size` bytes, type `type`. */
static void tar_header(uint8_t h[512], const char *name, size_t size, char type)
{
    unsigned sum = 0;
    int i;
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 124, 12, "%011lo", (unsigned long)(size & 077777777777ul));
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    for (i = 0; i < 512; i++) sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

static void test_tar(void **state)
{
    uint8_t tar[512 * 8];
    wire_tar_member_t *m = NULL;
    size_t n = 0, cut;
    char err[256];
    (void)state;
    memset(tar, 0, sizeof tar);
    tar_header(tar, "dir/", 0, '5');
    tar_header(tar + 512, "dir/a.ppm", 5, '0');
    memcpy(tar + 1024, "hello", 5);
    tar_header(tar + 1536, "././@LongLink", 300, 'L');
    memset(tar + 2048, 'n', 299);
    tar_header(tar + 2560, "short", 3, '0');
    memcpy(tar + 3072, "abc", 3);
    assert_int_equal(wire_tar_parse(&m, &n, tar, sizeof tar, 100, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(m[0].name, "dir/a.ppm");
    assert_int_equal(m[0].size, 5);
    assert_memory_equal(m[0].data, "hello", 5);
    assert_int_equal(strlen(m[1].name), 299); /* the GNU long name */
    assert_memory_equal(m[1].data, "abc", 3);
    wire_tar_free(m, n);
    assert_int_equal(wire_tar_parse(&m, &n, tar, sizeof tar, 1, err, sizeof err), -1);
    for (cut = 0; cut < sizeof tar; cut += 7) { /* every prefix: parses or fails, never reads past */
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, tar, cut);
        if (wire_tar_parse(&m, &n, copy, cut, 100, err, sizeof err) == 0) wire_tar_free(m, n);
        free(copy);
    }
    /* pax path= records: a good one names the next file; a record shorter
     * than its own length field, or without its newline, is ignored (the
     * shorter one once made a size_t wrap: found by fuzz_wire) */
    {
        static const char *recs[] = {"22 path=from/pax.jpeg\n", "1 path=from/pax.jpeg\n", "22 path=from/pax.jpeg!"};
        static const char *want[] = {"from/pax.jpeg", "short", "short"};
        size_t r;
        for (r = 0; r < 3; r++) {
            uint8_t t[512 * 4];
            memset(t, 0, sizeof t);
            tar_header(t, "pax", strlen(recs[r]), 'x');
            memcpy(t + 512, recs[r], strlen(recs[r]));
            tar_header(t + 1024, "short", 3, '0');
            assert_int_equal(wire_tar_parse(&m, &n, t, sizeof t, 100, err, sizeof err), 0);
            assert_int_equal(n, 1);
            assert_string_equal(m[0].name, want[r]);
            wire_tar_free(m, n);
        }
    }
    tar[512 + 148] ^= 1; /* bad checksum */
    assert_int_equal(wire_tar_parse(&m, &n, tar, sizeof tar, 100, err, sizeof err), -1);
    tar_header(tar + 512, "dir/a.ppm", 1u << 30, '0'); /* past the end */
    assert_int_equal(wire_tar_parse(&m, &n, tar, sizeof tar, 100, err, sizeof err), -1);
}

static void test_text(void **state)
{
    char s1[] = "a%20b%2Fc", s2[] = "bad%zz", s3[] = "nul%00", s4[] = "cut%2";
    json_t *j;
    (void)state;
    assert_int_equal(wire_percent_decode(s1), 0);
    assert_string_equal(s1, "a b/c");
    assert_int_equal(wire_percent_decode(s2), -1);
    assert_int_equal(wire_percent_decode(s3), -1);
    assert_int_equal(wire_percent_decode(s4), -1);
    assert_true(wire_utf8_valid("caf\xc3\xa9", 5));
    assert_false(wire_utf8_valid("caf\xc3", 4));
    assert_false(wire_utf8_valid("\xed\xa0\x80", 3)); /* a surrogate */
    assert_false(wire_utf8_valid("a\0b", 3));
    j = wire_json_str("x\xffy");
    assert_non_null(j);
    assert_string_equal(json_string_value(j), "x\xef\xbf\xbdy");
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multipart),
        cmocka_unit_test(test_header_param),
        cmocka_unit_test(test_tar),
        cmocka_unit_test(test_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
