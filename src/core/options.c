/* Option strings "key=value,key=value" parsed against a declared table. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/internal.h"

static const patina_optdef_t *find_def(const patina_optdef_t *defs, size_t n, const char *name,
                                       size_t len)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (strlen(defs[i].name) == len && strncmp(defs[i].name, name, len) == 0) return &defs[i];
    return NULL;
}

static int enum_index(const char *choices, const char *v)
{
    const char *p = choices;
    int idx = 0;
    size_t vl = strlen(v);
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == vl && strncmp(p, v, l) == 0) return idx;
        idx++;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

static void enum_name(char *out, size_t size, const char *choices, int idx)
{
    const char *p = choices;
    while (idx-- > 0 && p) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (!p) {
        snprintf(out, size, "?");
        return;
    }
    {
        const char *bar = strchr(p, '|');
        int l = bar ? (int)(bar - p) : (int)strlen(p);
        snprintf(out, size, "%.*s", l, p);
    }
}

static patina_status set_value(void *params, const patina_optdef_t *d, const char *v,
                               const char *what)
{
    char *field = (char *)params + d->offset;
    char *end;
    switch (d->type) {
    case PATINA_OPT_INT: {
        long x;
        errno = 0;
        x = strtol(v, &end, 10);
        if (errno || end == v || *end)
            return patina__fail(PATINA_E_INVALID, "%s: option '%s' wants an integer, got '%s'",
                                what, d->name, v);
        if ((double)x < d->min || (double)x > d->max)
            return patina__fail(PATINA_E_INVALID, "%s: option '%s'=%ld is out of range [%g, %g]",
                                what, d->name, x, d->min, d->max);
        *(int *)field = (int)x;
        return PATINA_OK;
    }
    case PATINA_OPT_DOUBLE: {
        double x;
        errno = 0;
        x = strtod(v, &end);
        /* Underflow (ERANGE with a subnormal or zero result) keeps the
         * nearest double: it is what the canonical spec prints for a
         * subnormal value, which must read back. Overflow is refused. */
        if ((errno && !(errno == ERANGE && isfinite(x))) || end == v || *end || isnan(x))
            return patina__fail(PATINA_E_INVALID, "%s: option '%s' wants a number, got '%s'",
                                what, d->name, v);
        if (x < d->min || x > d->max)
            return patina__fail(PATINA_E_INVALID, "%s: option '%s'=%g is out of range [%g, %g]",
                                what, d->name, x, d->min, d->max);
        *(double *)field = x;
        return PATINA_OK;
    }
    case PATINA_OPT_BOOL:
        if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
            *(int *)field = 1;
        else if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off"))
            *(int *)field = 0;
        else
            return patina__fail(PATINA_E_INVALID, "%s: option '%s' wants 0 or 1, got '%s'", what,
                                d->name, v);
        return PATINA_OK;
    case PATINA_OPT_ENUM: {
        int i = enum_index(d->choices, v);
        if (i < 0)
            return patina__fail(PATINA_E_INVALID, "%s: option '%s' must be one of %s, got '%s'",
                                what, d->name, d->choices, v);
        *(int *)field = i;
        return PATINA_OK;
    }
    case PATINA_OPT_STRING:
        if (strlen(v) >= PATINA_OPT_STRMAX)
            return patina__fail(PATINA_E_LIMIT, "%s: option '%s' is longer than %d characters",
                                what, d->name, PATINA_OPT_STRMAX - 1);
        strcpy(field, v);
        return PATINA_OK;
    }
    return patina__fail(PATINA_E_INTERNAL, "%s: option '%s' has a bad type", what, d->name);
}

patina_status patina_opts_parse(void *params, const patina_optdef_t *defs, size_t ndefs,
                                const char *text, const char *what)
{
    char buf[4096];
    char value[4096];
    const patina_optdef_t *cur = NULL;
    size_t i, vlen = 0;
    char *tok, *save = NULL;
    unsigned char seen[64] = {0};

    if (ndefs > sizeof seen)
        return patina__fail(PATINA_E_INTERNAL, "%s: more than %zu options", what, sizeof seen);
    for (i = 0; i < ndefs; i++)
        PATINA_TRY(set_value(params, &defs[i], defs[i].def, what));
    if (!text || !*text) return PATINA_OK;
    if (strlen(text) >= sizeof buf)
        return patina__fail(PATINA_E_LIMIT, "%s: options longer than %zu characters", what,
                            sizeof buf - 1);
    strcpy(buf, text);
    value[0] = '\0';
    for (tok = strtok_r(buf, ",", &save);; tok = strtok_r(NULL, ",", &save)) {
        const char *eq = tok ? strchr(tok, '=') : NULL;
        if (!tok || eq) {
            if (cur) {                              /* flush the previous option */
                PATINA_TRY(set_value(params, cur, value, what));
                cur = NULL;
            }
            if (!tok) break;
            cur = find_def(defs, ndefs, tok, (size_t)(eq - tok));
            if (!cur) {
                char names[1024] = "";
                for (i = 0; i < ndefs; i++) {
                    strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
                    strncat(names, defs[i].name, sizeof names - strlen(names) - 1);
                }
                return patina__fail(PATINA_E_INVALID, "%s: unknown option '%.*s' (options: %s)",
                                    what, (int)(eq - tok), tok, ndefs ? names : "none");
            }
            if (seen[cur - defs])
                return patina__fail(PATINA_E_INVALID, "%s: option '%s' given twice", what,
                                    cur->name);
            seen[cur - defs] = 1;
            vlen = strlen(eq + 1);
            memcpy(value, eq + 1, vlen + 1);
            if (vlen == 0)
                return patina__fail(PATINA_E_INVALID, "%s: option '%s' has no value", what,
                                    cur->name);
        } else {
            size_t tl = strlen(tok);
            if (!cur)
                return patina__fail(PATINA_E_INVALID, "%s: '%s' is not key=value", what, tok);
            if (cur->type != PATINA_OPT_STRING)
                return patina__fail(PATINA_E_INVALID, "%s: option '%s' takes one value, got more",
                                    what, cur->name);
            if (vlen + tl + 2 > sizeof value)
                return patina__fail(PATINA_E_LIMIT, "%s: option '%s' is too long", what, cur->name);
            value[vlen++] = ',';
            memcpy(value + vlen, tok, tl + 1);
            vlen += tl;
        }
    }
    return PATINA_OK;
}

void patina_opts_format(char *buf, size_t size, const void *params, const patina_optdef_t *defs,
                        size_t ndefs, size_t terse_from)
{
    size_t i, used = 0;
    if (size == 0) return;
    buf[0] = '\0';
    for (i = 0; i < ndefs && used < size; i++) {
        const char *field = (const char *)params + defs[i].offset;
        char v[PATINA_OPT_STRMAX];
        switch (defs[i].type) {
        case PATINA_OPT_INT:
        case PATINA_OPT_BOOL: snprintf(v, sizeof v, "%d", *(const int *)field); break;
        case PATINA_OPT_DOUBLE: {   /* shortest text that reads back to the same double */
            double x = *(const double *)field;
            for (int prec = 1; prec <= 17; prec++) {
                snprintf(v, sizeof v, "%.*g", prec, x);
                if (strtod(v, NULL) == x) break;
            }
            break;
        }
        case PATINA_OPT_ENUM: enum_name(v, sizeof v, defs[i].choices, *(const int *)field); break;
        case PATINA_OPT_STRING: snprintf(v, sizeof v, "%s", field); break;
        }
        if (terse_from && i >= terse_from && defs[i].def && strcmp(v, defs[i].def) == 0) continue;
        used += (size_t)snprintf(buf + used, size - used, "%s%s=%s", used ? "," : "", defs[i].name, v);
    }
}
