/* Prints the layout of the public structs the Python binding mirrors with
 * ctypes (python/patina/_lib.py): for each, its size and the offset of each
 * member, as JSON. python/tests/test_abi.py compares them with the ctypes
 * classes, so a member added to a header (a new option, a new statistic)
 * without its ctypes twin fails a test instead of making the library write
 * past a Python-owned buffer. A struct or member added here must be
 * mirrored there (and the reverse). Under "#constants", the values of the
 * enum and macro constants the binding spells out (_lib.C_CONSTANTS). */
#include <stddef.h>
#include <stdio.h>

#include "patina/patina.h"

static int g_structs, g_members;

static void begin(const char *name, size_t size)
{
    printf("%s\n  \"%s\": {\"size\": %zu, \"fields\": {", g_structs++ ? "," : "{", name, size);
    g_members = 0;
}

static void member(const char *name, size_t offset)
{
    printf("%s\"%s\": %zu", g_members++ ? ", " : "", name, offset);
}

static void end(void) { printf("}}"); }

#define S(T) begin(#T, sizeof(T))
#define M(T, m) member(#m, offsetof(T, m))
#define C(name) member(#name, (size_t)(name))

int main(void)
{
    S(patina_image_t), M(patina_image_t, width), M(patina_image_t, height), M(patina_image_t, stride),
        M(patina_image_t, data), M(patina_image_t, owned), end();
    S(patina_limits_t), M(patina_limits_t, max_pixels), M(patina_limits_t, max_file_bytes), end();
    S(patina_decode_opts_t), M(patina_decode_opts_t, limits), M(patina_decode_opts_t, strict),
        M(patina_decode_opts_t, apply_orientation), end();
    S(patina_decode_report_t), M(patina_decode_report_t, warnings), M(patina_decode_report_t, warning), end();
    S(patina_context_opts_t), M(patina_context_opts_t, threads), M(patina_context_opts_t, gpu_index),
        M(patina_context_opts_t, gpu_mem_budget), M(patina_context_opts_t, limits),
        M(patina_context_opts_t, nvjpeg_library), M(patina_context_opts_t, nvjpeg_lanes),
        M(patina_context_opts_t, gpus), end();
    S(patina_load_opts_t), M(patina_load_opts_t, strict), M(patina_load_opts_t, batch_memory),
        M(patina_load_opts_t, apply_orientation), end();
    S(patina_load_result_t), M(patina_load_result_t, status), M(patina_load_result_t, error),
        M(patina_load_result_t, report), end();
    S(patina_option_info_t), M(patina_option_info_t, name), M(patina_option_info_t, type),
        M(patina_option_info_t, min), M(patina_option_info_t, max), M(patina_option_info_t, def),
        M(patina_option_info_t, choices), M(patina_option_info_t, help),
        M(patina_option_info_t, min_open), end();
    S(patina_record_t), M(patina_record_t, id), M(patina_record_t, key), M(patina_record_t, size),
        M(patina_record_t, sha256), M(patina_record_t, mtime), M(patina_record_t, added), M(patina_record_t, width),
        M(patina_record_t, height), end();
    S(patina_insert_t), M(patina_insert_t, key), M(patina_insert_t, size), M(patina_insert_t, sha256),
        M(patina_insert_t, mtime), M(patina_insert_t, width), M(patina_insert_t, height), M(patina_insert_t, desc),
        end();
    S(patina_collection_info_t), M(patina_collection_info_t, format), M(patina_collection_info_t, records),
        M(patina_collection_info_t, next_id), M(patina_collection_info_t, tables),
        M(patina_collection_info_t, map_size), M(patina_collection_info_t, used),
        M(patina_collection_info_t, page_size), M(patina_collection_info_t, max_readers), end();
    S(patina_hit_t), M(patina_hit_t, id), M(patina_hit_t, distance), end();
    S(patina_search_stats_t), M(patina_search_stats_t, gpu_tensor), M(patina_search_stats_t, gpu_filter),
        M(patina_search_stats_t, gpu_exact), M(patina_search_stats_t, cpu), M(patina_search_stats_t, chunks),
        M(patina_search_stats_t, host_bytes), M(patina_search_stats_t, pivot_dists),
        M(patina_search_stats_t, pruned), M(patina_search_stats_t, computed), end();
    S(patina_identify_opts_t), M(patina_identify_opts_t, k), M(patina_identify_opts_t, ratio),
        M(patina_identify_opts_t, scoring), M(patina_identify_opts_t, verify), M(patina_identify_opts_t, verify_top),
        M(patina_identify_opts_t, model), M(patina_identify_opts_t, ransac_threshold),
        M(patina_identify_opts_t, iterations), M(patina_identify_opts_t, shape_check), M(patina_identify_opts_t, seed),
        M(patina_identify_opts_t, threshold), M(patina_identify_opts_t, device), M(patina_identify_opts_t, precision),
        M(patina_identify_opts_t, gpu_arena_slots), M(patina_identify_opts_t, guided),
        M(patina_identify_opts_t, guided_ratio), M(patina_identify_opts_t, ambiguity),
        M(patina_identify_opts_t, distinct), M(patina_identify_opts_t, sibling_inliers),
        M(patina_identify_opts_t, accept), M(patina_identify_opts_t, view_candidates),
        M(patina_identify_opts_t, first_features), M(patina_identify_opts_t, half_view_features), end();
    S(patina_identify_hit_t), M(patina_identify_hit_t, id), M(patina_identify_hit_t, score),
        M(patina_identify_hit_t, matches), M(patina_identify_hit_t, inliers), M(patina_identify_hit_t, verified),
        end();
    S(patina_identify_result_t), M(patina_identify_result_t, decision), M(patina_identify_result_t, nhits),
        M(patina_identify_result_t, query_features), M(patina_identify_result_t, threshold), end();
    S(patina_rootsift_info_t), M(patina_rootsift_info_t, count), M(patina_rootsift_info_t, m),
        M(patina_rootsift_info_t, f16), M(patina_rootsift_info_t, qscale), M(patina_rootsift_info_t, downscale),
        M(patina_rootsift_info_t, width), M(patina_rootsift_info_t, height), M(patina_rootsift_info_t, orig_width),
        M(patina_rootsift_info_t, orig_height), end();
    S(patina_signature_info_t), M(patina_signature_info_t, count), M(patina_signature_info_t, k),
        M(patina_signature_info_t, alpha), M(patina_signature_info_t, form), end();
    S(patina_pivot_opts_t), M(patina_pivot_opts_t, pivots), M(patina_pivot_opts_t, select),
        M(patina_pivot_opts_t, seed), end();
    S(patina_table_opts_t), M(patina_table_opts_t, partition), M(patina_table_opts_t, partitions),
        M(patina_table_opts_t, pivots), M(patina_table_opts_t, need), M(patina_table_opts_t, create), end();
    S(patina_table_query_t), M(patina_table_query_t, kind), M(patina_table_query_t, k),
        M(patina_table_query_t, radius), M(patina_table_query_t, max_hits), M(patina_table_query_t, device),
        M(patina_table_query_t, bound), M(patina_table_query_t, keys), M(patina_table_query_t, stats), end();
    S(patina_table_results_t), M(patina_table_results_t, nq), M(patina_table_results_t, offsets),
        M(patina_table_results_t, hits), M(patina_table_results_t, keys), M(patina_table_results_t, rows),
        M(patina_table_results_t, version), end();
    S(patina_table_fanout_t), M(patina_table_fanout_t, slices), M(patina_table_fanout_t, total),
        M(patina_table_fanout_t, slice_max), M(patina_table_fanout_t, slice_min), M(patina_table_fanout_t, start_max),
        M(patina_table_fanout_t, merge), end();
    S(patina_change_t), M(patina_change_t, op), M(patina_change_t, id), M(patina_change_t, key),
        M(patina_change_t, desc), end();

    /* the integer constants the binding spells out (_lib.C_CONSTANTS) */
    printf(",\n  \"#constants\": {");
    g_members = 0;
    C(PATINA_OPEN_READONLY), C(PATINA_OPEN_WRITE), C(PATINA_OPEN_CREATE);
    C(PATINA_ELEM_U8), C(PATINA_ELEM_U16), C(PATINA_ELEM_U32), C(PATINA_ELEM_F32), C(PATINA_ELEM_F64);
    C(PATINA_DEVICE_AUTO), C(PATINA_DEVICE_CPU), C(PATINA_DEVICE_GPU), C(PATINA_DEVICE_HYBRID);
    C(PATINA_CAP_SEARCH), C(PATINA_CAP_IDENTIFY), C(PATINA_CAP_PIVOTS), C(PATINA_CAP_GPU), C(PATINA_CAP_HYBRID);
    C(PATINA_CAP_CODEMAP), C(PATINA_CAP_JSON), C(PATINA_CAP_KEYPOINTS), C(PATINA_CAP_CENTROIDS);
    C(PATINA_QUERY_KNN), C(PATINA_QUERY_RANGE), C(PATINA_CHANGE_PUT), C(PATINA_CHANGE_REMOVE);
    C(PATINA_BOUND_PTOLEMAIC), C(PATINA_BOUND_METRIC), C(PATINA_BOUND_NONE);
    C(PATINA_WARNING_MAX), C(PATINA_ERROR_MAX), C(PATINA_KEY_MAX);
    printf("}\n}\n");
    return 0;
}
