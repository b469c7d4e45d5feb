/* The family table and extractors (a family + its parsed options). Extraction
 * itself is src/features/extract.c; the execution context src/core/context.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "features/family.h"
#include "search/distance.h"
#include "patina/descriptor.h"

static const patina_family_t *const families[] = {
    &patina_family_cedd,
    &patina_family_lbp,
    &patina_family_lbp8,
    &patina_family_tlbap,
    &patina_family_lanadp,
    &patina_family_glcm,
    &patina_family_haralick,
    &patina_family_rootsift,
    &patina_family_signature,
};
#define NFAMILIES (sizeof families / sizeof families[0])

size_t patina_family_count(void) { return NFAMILIES; }
const char *patina_family_name(size_t i) { return i < NFAMILIES ? families[i]->name : NULL; }
const char *patina_family_help(size_t i) { return i < NFAMILIES ? families[i]->help : NULL; }

size_t patina_family_option_count(size_t family) { return family < NFAMILIES ? families[family]->nopts : 0; }

patina_status patina_family_option(patina_option_info_t *info, size_t family, size_t i)
{
    const patina_optdef_t *d;
    if (!info) return patina__fail(PATINA_E_INVALID, "descriptor: patina_family_option: info is NULL");
    memset(info, 0, sizeof *info);
    if (family >= NFAMILIES)
        return patina__fail(PATINA_E_INVALID, "descriptor: no family %zu (there are %zu)", family,
                            (size_t)NFAMILIES);
    if (i >= families[family]->nopts)
        return patina__fail(PATINA_E_INVALID, "descriptor: family '%s' has no option %zu (it has %zu)",
                            families[family]->name, i, families[family]->nopts);
    d = &families[family]->opts[i];
    info->name = d->name;
    switch (d->type) {
    case PATINA_OPT_INT: info->type = PATINA_OPTION_INT; break;
    case PATINA_OPT_DOUBLE: info->type = PATINA_OPTION_DOUBLE; break;
    case PATINA_OPT_BOOL: info->type = PATINA_OPTION_BOOL; break;
    case PATINA_OPT_ENUM: info->type = PATINA_OPTION_ENUM; break;
    case PATINA_OPT_STRING: info->type = PATINA_OPTION_STRING; break;
    }
    if (d->type == PATINA_OPT_INT || d->type == PATINA_OPT_DOUBLE) {
        info->min = d->min;
        info->max = d->max;
    }
    info->def = d->def;
    info->choices = d->type == PATINA_OPT_ENUM ? d->choices : NULL;
    info->help = d->help ? d->help : "";
    return PATINA_OK;
}

const char *patina_device_name(patina_device d)
{
    switch (d) {
    case PATINA_DEVICE_AUTO: return "auto";
    case PATINA_DEVICE_CPU: return "cpu";
    case PATINA_DEVICE_GPU: return "gpu";
    case PATINA_DEVICE_HYBRID: return "hybrid";
    }
    return NULL;
}

patina_status patina_device_parse(patina_device *d, const char *name)
{
    static const patina_device all[] = {PATINA_DEVICE_AUTO, PATINA_DEVICE_CPU, PATINA_DEVICE_GPU,
                                        PATINA_DEVICE_HYBRID};
    size_t i;
    for (i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(name, patina_device_name(all[i]))) {
            *d = all[i];
            return PATINA_OK;
        }
    return patina__fail(PATINA_E_INVALID, "unknown device '%s' (auto, cpu, gpu or hybrid)",
                        name ? name : "(null)");
}

size_t patina_elem_size(patina_elem e)
{
    switch (e) {
    case PATINA_ELEM_U8: return 1;
    case PATINA_ELEM_U16: return 2;
    case PATINA_ELEM_U32: return 4;
    case PATINA_ELEM_F32: return 4;
    case PATINA_ELEM_F64: return 8;
    }
    return 0;
}

patina_status patina_extractor_new(patina_extractor_t **ex, const char *spec)
{
    const char *colon;
    size_t nlen, i;
    const patina_family_t *fam = NULL;
    patina_extractor_t *e;
    char opts[PATINA_PARAMS_MAX];

    *ex = NULL;
    if (!spec || !*spec) return patina__fail(PATINA_E_INVALID, "descriptor: empty family name");
    colon = strchr(spec, ':');
    nlen = colon ? (size_t)(colon - spec) : strlen(spec);
    for (i = 0; i < NFAMILIES; i++)
        if (strlen(families[i]->name) == nlen && !strncmp(families[i]->name, spec, nlen))
            fam = families[i];
    if (!fam) {
        char names[512] = "";
        for (i = 0; i < NFAMILIES; i++) {
            strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
            strncat(names, families[i]->name, sizeof names - strlen(names) - 1);
        }
        return patina__fail(PATINA_E_INVALID, "descriptor: unknown family '%.*s' (known: %s)",
                            (int)nlen, spec, names);
    }
    e = calloc(1, sizeof *e);
    if (!e) return patina__fail(PATINA_E_NOMEM, "descriptor: out of memory");
    e->family = fam;
    {
        patina_status s = patina_opts_parse(e->params, fam->opts, fam->nopts,
                                            colon ? colon + 1 : NULL, fam->name);
        if (s == PATINA_OK && fam->check) s = fam->check(e->params);
        if (s != PATINA_OK) {
            free(e);
            return s;
        }
    }
    patina_opts_format(opts, sizeof opts, e->params, fam->opts, fam->nopts, fam->terse_from);
    snprintf(e->spec, sizeof e->spec, "%s%s%s", fam->name, *opts ? ":" : "", opts);
    *ex = e;
    return PATINA_OK;
}

void patina_extractor_free(patina_extractor_t *ex) { free(ex); }
const char *patina_extractor_spec(const patina_extractor_t *ex) { return ex->spec; }
const char *patina_extractor_family(const patina_extractor_t *ex) { return ex->family->name; }
size_t patina_extractor_dim(const patina_extractor_t *ex) { return ex->family->dim(ex->params); }
patina_elem patina_extractor_elem(const patina_extractor_t *ex)
{
    return ex->family->elem_for ? ex->family->elem_for(ex->params) : ex->family->elem;
}

size_t patina_extractor_bytes(const patina_extractor_t *ex)
{
    return patina_extractor_dim(ex) * patina_elem_size(patina_extractor_elem(ex));
}

static pdist_t distance_id(const patina_extractor_t *ex)
{
    return ex->family->distance_for ? ex->family->distance_for(ex->params) : ex->family->distance;
}

const char *patina_extractor_distance_name(const patina_extractor_t *ex)
{
    return pdist_get(distance_id(ex))->name;
}

static unsigned family_caps(const patina_family_t *f)
{
    unsigned caps = f->uses;
    if (PATINA_HAVE_CUDA && f->gpu) caps |= PATINA_CAP_GPU;
    if (PATINA_HAVE_CUDA && f->hybrid) caps |= PATINA_CAP_HYBRID;
    if (f->codemap) caps |= PATINA_CAP_CODEMAP;
    if (f->json) caps |= PATINA_CAP_JSON;
    return caps;
}

unsigned patina_family_caps(size_t i) { return i < NFAMILIES ? family_caps(families[i]) : 0; }

unsigned patina_extractor_caps(const patina_extractor_t *ex) { return ex ? family_caps(ex->family) : 0; }

int patina_extractor_has_device(const patina_extractor_t *ex, patina_device d)
{
    switch (d) {
    case PATINA_DEVICE_AUTO:
    case PATINA_DEVICE_CPU: return 1;
    case PATINA_DEVICE_GPU: return PATINA_HAVE_CUDA && ex->family->gpu != NULL;
    case PATINA_DEVICE_HYBRID: return PATINA_HAVE_CUDA && ex->family->hybrid != NULL;
    }
    return 0;
}

double patina_extractor_distance(const patina_extractor_t *ex, const void *a, const void *b)
{
    const size_t bytes = patina_extractor_bytes(ex), align = PATINA_ROW_ALIGN(patina_elem_size(patina_extractor_elem(ex)));
    void *ta = NULL, *tb = NULL;
    double d = NAN;
    if (patina__rows(&a, 1, bytes, align, &ta, "distance") == PATINA_OK &&
        patina__rows(&b, 1, bytes, align, &tb, "distance") == PATINA_OK)
        d = pdist_get(distance_id(ex))->pair(patina_extractor_elem(ex), a, b, patina_extractor_dim(ex), NULL);
    free(ta);
    free(tb);
    return d;
}

int patina_extractor_has_json(const patina_extractor_t *ex) { return ex->family->json != NULL; }

patina_status patina_extractor_json(const patina_extractor_t *ex, const patina_image_t *img,
                                    char **json)
{
    *json = NULL;
    if (!ex->family->json)
        return patina__fail(PATINA_E_UNAVAILABLE, "%s: no JSON description beyond the descriptor",
                            ex->family->name);
    return ex->family->json(ex->params, json, img);
}

int patina_extractor_has_codemap(const patina_extractor_t *ex)
{
    return ex && ex->family->codemap != NULL;
}

int patina__extractor_reads_device(const patina_extractor_t *ex) { return ex->family->gpu_reads_device; }
