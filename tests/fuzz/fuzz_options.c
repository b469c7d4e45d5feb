/* Fuzz target: descriptor specs "family[:key=value,...]" — the family lookup
 * (src/features/registry.c), the option-string parser (src/core/options.c)
 * and every family's option checks — through patina_extractor_new. The input
 * is the spec as a C string. An accepted spec must give a usable extractor:
 * a canonical spec naming the same family, a non-zero size that matches the
 * element type, a distance name, a distance of 0 between two equal (zero)
 * descriptors; and its canonical spec must parse back to itself.
 * Seeds and dictionary come from the registry at build time (every family's
 * name and canonical spec) plus hand-written variants, so a new family is
 * fuzzed without touching this file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "search/distance.h"

#define SPEC_MAX 8192 /* longer inputs are cut; the parser's own limit is 4 KiB of options */
#define DESC_CHECK_MAX (1u << 20) /* bytes of zero descriptors the distance check uses */

static int known_elem(patina_elem e) { return e >= PATINA_ELEM_U8 && e <= PATINA_ELEM_F64; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char spec[SPEC_MAX + 1];
    static uint8_t zeros[DESC_CHECK_MAX];
    patina_extractor_t *ex = NULL, *ex2 = NULL;
    patina_status s;
    const char *canon, *fam;
    size_t n = size < SPEC_MAX ? size : SPEC_MAX, famlen, dim, bytes;

    memcpy(spec, data, n);
    spec[n] = '\0';
    s = patina_extractor_new(&ex, spec);
    if (s != PATINA_OK) {
        FUZZ_CHECK(s == PATINA_E_INVALID || s == PATINA_E_LIMIT, "extractor_new returned %d", (int)s);
        FUZZ_CHECK(ex == NULL, "failed extractor_new left an extractor");
        FUZZ_CHECK(patina_last_error()[0] != '\0', "failed extractor_new set no message");
        return 0;
    }
    FUZZ_CHECK(ex != NULL, "extractor_new gave OK and no extractor");

    canon = patina_extractor_spec(ex);
    fam = patina_extractor_family(ex);
    FUZZ_CHECK(canon && fam && *fam, "no spec or family name");
    famlen = strlen(fam);
    FUZZ_CHECK(strncmp(spec, fam, famlen) == 0 && (spec[famlen] == '\0' || spec[famlen] == ':'),
               "spec '%.100s' gave family '%s'", spec, fam);
    FUZZ_CHECK(strncmp(canon, fam, famlen) == 0 && (canon[famlen] == '\0' || canon[famlen] == ':'),
               "canonical spec '%s' of family '%s'", canon, fam);
    dim = patina_extractor_dim(ex);
    bytes = patina_extractor_bytes(ex);
    FUZZ_CHECK(dim > 0, "'%s' has dimension 0", canon);
    FUZZ_CHECK(known_elem(patina_extractor_elem(ex)), "'%s' has element type %d", canon,
               (int)patina_extractor_elem(ex));
    FUZZ_CHECK(bytes == dim * patina_elem_size(patina_extractor_elem(ex)),
               "'%s': %zu bytes for %zu elements of %zu bytes", canon, bytes, dim,
               patina_elem_size(patina_extractor_elem(ex)));
    FUZZ_CHECK(patina_extractor_distance_name(ex) && *patina_extractor_distance_name(ex),
               "'%s' has no distance name", canon);
    (void)patina_extractor_has_device(ex, PATINA_DEVICE_GPU);
    (void)patina_extractor_has_json(ex);
    (void)patina_extractor_has_codemap(ex);
    {   /* Element-wise distances: 0 between two equal (zero) descriptors.
         * Record distances read a family's record layout (rootsift_ratio),
         * which zero bytes are not: they must refuse it (NaN), not crash. */
        const int di = pdist_find(patina_extractor_distance_name(ex));
        const pdist_def_t *def = di >= 0 ? pdist_get((pdist_t)di) : NULL;
        FUZZ_CHECK(def != NULL, "'%s': distance '%s' is not in the table", canon,
                   patina_extractor_distance_name(ex));
        if (bytes <= sizeof zeros) {
            double d = patina_extractor_distance(ex, zeros, zeros);
            if (def->record)
                FUZZ_CHECK(isnan(d), "'%s': record distance of zero bytes is %g", canon, d);
            else
                FUZZ_CHECK(d == 0.0, "'%s': distance between equal zero descriptors is %g", canon, d);
        }
    }

    /* The canonical spec reads back to the same extractor. */
    s = patina_extractor_new(&ex2, canon);
    FUZZ_CHECK(s == PATINA_OK, "canonical spec '%s' of '%.200s' does not parse", canon, spec);
    FUZZ_CHECK(strcmp(patina_extractor_spec(ex2), canon) == 0, "canonical spec '%s' reads back as '%s'",
               canon, patina_extractor_spec(ex2));
    FUZZ_CHECK(patina_extractor_dim(ex2) == dim && patina_extractor_elem(ex2) == patina_extractor_elem(ex) &&
                   strcmp(patina_extractor_distance_name(ex2), patina_extractor_distance_name(ex)) == 0,
               "canonical spec '%s' reads back as another descriptor", canon);
    patina_extractor_free(ex2);
    patina_extractor_free(ex);
    return 0;
}

/* ------------------------------------------------------------------ seeds */

/* Dictionary entries from a canonical spec: each "key=" and each value
 * (list values piece by piece). */
static void dict_from_spec(fuzz_seeds_t *w, const char *canon)
{
    const char *p = strchr(canon, ':');
    while (p && *++p) {
        size_t len = strcspn(p, ",");
        const char *eq = memchr(p, '=', len);
        if (eq) {
            fuzz_dict(w, p, (size_t)(eq - p) + 1);
            if (p + len > eq + 1) fuzz_dict(w, eq + 1, (size_t)(p + len - eq - 1));
        } else if (len) {
            fuzz_dict(w, p, len);
        }
        p += len;
        if (!*p) break;
    }
}

void fuzz_write_seeds(fuzz_seeds_t *w)
{
    /* Hand-written variants: accepted and refused, every option type. */
    static const char *const variants[] = {
        "cedd:compact=1",
        "cedd:compact=true",
        "cedd:compact=2",
        "lbp:P=16,R=2,method=uniform",
        "lbp:P=24,R=3,method=nri_uniform,grid=2x2,norm=counts",
        "lbp:P=8,R=1.5,method=var,vbins=32",
        "lbp:P=8,R=1,method=ror,mapping=riu2,distance=hellinger",
        "lbp:P=32,R=4,method=default,mapping=u2",
        "lbp8:mapping=u2,grid=3x4,distance=intersection",
        "lbp8:grid=256x256",
        "tlbap:th=0.5,mapping=riu2",
        "tlbap:th=1e-300",
        "lanadp:norm=counts,distance=l1",
        "glcm:levels=8,distances=1,2,angles=0,90",
        "glcm:levels=256,quant=none,symmetric=0,normed=1",
        "glcm:offsets=0:1,1:0,-1:1",
        "glcm:distances=1.5,angles=-45,3600",
        "glcm:mask=some/path.png",
        "haralick:form=both,distances=1,2,4",
        "haralick:offsets=0:1,form=offsets",
        "haralick:levels=2,angles=0",
        "cedd:",
        "lbp:P=8,P=8",
        "lbp:R=nan",
        "glcm:distances=,",
        "nosuchfamily:x=1",
    };
    static const char *const tokens[] = {
        ":", "=", ",", "x", "true", "false", "yes", "no", "on", "off", "none", "uniform",
        "default", "ror", "nri_uniform", "var", "u2", "ri", "riu2", "counts", "l1", "chi2",
        "intersection", "hellinger", "meanrange", "offsets", "both", "nan", "inf", "-inf",
        "1e308", "1e-308", "0x1p-1074", "-0", "2147483647", "2147483648", "-2147483649",
        "9223372036854775808", "256x256", "0:1",
    };
    char name[64];
    size_t i;
    for (i = 0; i < patina_family_count(); i++) {
        const char *fam = patina_family_name(i);
        patina_extractor_t *ex;
        snprintf(name, sizeof name, "family-%s", fam);
        fuzz_seed(w, name, fam, strlen(fam));
        fuzz_dict_str(w, fam);
        if (patina_extractor_new(&ex, fam) != PATINA_OK) {
            fprintf(stderr, "fuzz_options: family '%s' refuses its defaults: %s\n", fam, patina_last_error());
            exit(1);
        }
        snprintf(name, sizeof name, "canonical-%s", fam);
        fuzz_seed(w, name, patina_extractor_spec(ex), strlen(patina_extractor_spec(ex)));
        dict_from_spec(w, patina_extractor_spec(ex));
        patina_extractor_free(ex);
    }
    for (i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        snprintf(name, sizeof name, "variant-%02zu", i);
        fuzz_seed(w, name, variants[i], strlen(variants[i]));
    }
    { /* longer than the parser's 4 KiB of options (and libFuzzer's default -max_len) */
        static char long_spec[4200];
        size_t n = (size_t)snprintf(long_spec, sizeof long_spec, "glcm:angles=0");
        while (n + 3 < sizeof long_spec) n += (size_t)snprintf(long_spec + n, sizeof long_spec - n, ",45");
        fuzz_seed(w, "variant-long", long_spec, n);
    }
    for (i = 0; i < sizeof tokens / sizeof tokens[0]; i++) fuzz_dict_str(w, tokens[i]);
}
