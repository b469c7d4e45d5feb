/* Indexing pipeline: files -> decode workers -> batches -> extract (CPU, GPU
 * or hybrid) -> one store transaction per batch; and parallel loading of
 * files for other front ends (patina_load_files).
 *
 * Paths may be files or directories (recursed, sorted, hidden entries
 * skipped, files no image loader recognises left out; see patina_walk).
 * Each file is stored under its key (patina_collection_key: relative to
 * the collection's root, whatever the spelling of its path). A file whose
 * key is stored already with the same SHA-256 (and a descriptor in the
 * table) is skipped, so an interrupted run resumes. A file under a new key
 * whose content (SHA-256) is stored under another key, or met earlier in
 * the run, is a duplicate: reported through on_duplicate, counted, and
 * indexed as well (two files may be equal) unless skip_duplicates is set.
 * A file that fails (unreadable, corrupt,
 * unsupported, over limit) is reported through on_error and counted; the
 * others still succeed. Video files (recognised by their first bytes) and
 * "-" (standard input) are read frame by frame (include/patina/video.h):
 * each kept frame is stored as a record of its own; a damaged or truncated
 * video keeps its good frames and is reported through on_error. A file decoded with a decoder warning (damaged but
 * decodable data, see image.h) is reported through on_warning and counted;
 * with `strict` it fails instead. */
#ifndef PATINA_PIPELINE_H
#define PATINA_PIPELINE_H

#include <stddef.h>
#include <stdint.h>
#include "patina/descriptor.h"
#include "patina/options.h"
#include "patina/status.h"
#include "patina/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct patina_index_stats {
    uint64_t files;      /* files found */
    uint64_t indexed;    /* newly stored (or replaced) */
    uint64_t skipped;    /* already stored under their key with the same content */
    uint64_t duplicates; /* new keys whose content is stored under another key (or met earlier in
                            the run): also counted as indexed, or, with skip_duplicates, only here */
    uint64_t failed;     /* could not be read, decoded or stored */
    uint64_t warned;     /* decoded with a decoder warning (also counted as indexed or, when
                            strict, as failed) */
    uint64_t bytes;      /* encoded bytes read */
    uint64_t pixels;     /* decoded pixels */
    double seconds;      /* wall time so far */
    patina_device device;/* device the descriptors were computed on */
    uint64_t gpu_decoded;/* images decoded on the GPU (PATINA_JPEG_NVJPEG or PATINA_JPEG_EXACT_GPU) */
    /* Wall seconds per stage, summed over batches. read + decode run on the
     * producer side, overlapping extract + store when the device is the GPU;
     * wait is the time the store side waited for the producer. */
    double t_read, t_decode, t_extract, t_store, t_wait;
    /* Video files (docs/video.md): each kept frame is a record. `indexed` and
     * `skipped` count frames too; these say how many of them were frames,
     * and how many video files were read to their end without an error (a
     * video that fails is counted in `failed`; its good frames stay). */
    uint64_t frames, frames_skipped, videos;
    /* The exact GPU decoder's part of t_decode (0 with the other decoders):
     * its host stage (entropy decoding on the workers), its allocations
     * (the context's decoders on first use, or a larger batch than before),
     * and the time spent waiting for its device stage (the producer's
     * rounds, and the store side's wait for a window's last round before it
     * extracts, which t_decode also counts). */
    double t_jpegx_entropy, t_jpegx_setup, t_jpegx_wait;
    /* Wall seconds the extract + store side had nothing to work on: its
     * waits for the producer (t_wait: the next window read and decoded, or
     * a video's next frames) and for the exact GPU decoder's last round of a
     * window. With the stages overlapping (the GPU device), t_starved /
     * seconds is the part of the run that reading and decoding cost beyond
     * what ran alongside extraction; t_decode counts a decoder's own time,
     * its waits for a GPU busy with extraction included. */
    double t_starved;
} patina_index_stats_t;

/* Who decodes JPEG files. libjpeg-turbo on the CPU workers gives the
 * reference's pixels (LIRE's descriptors to the bit). exact-gpu gives the
 * same pixels, byte for byte: libjpeg-turbo entropy-decodes on the CPU
 * workers, the GPU does the rest (IDCT, upsampling, colour) and the images
 * stay in device memory. nvJPEG decodes on the GPU (the JPEG engines where
 * the device has them) straight into device memory, close to but not
 * identical with those pixels (docs/images.md). The GPU decoders need
 * --device gpu and a family whose GPU path reads device memory (cedd); files
 * they do not take (damaged, with decoder warnings, not JPEG; for nvJPEG also
 * progressive and CMYK) are decoded by libjpeg-turbo. auto (the default) is
 * exact-gpu when every family of the call runs on the GPU and reads device
 * images (ahead of libjpeg-turbo on all CPU threads end to end for every
 * family measured: bench_pipeline, docs/images.md), libjpeg otherwise, and
 * libjpeg when the exact decoder cannot be set up (GPU memory). */
typedef enum patina_jpeg_decoder {
    PATINA_JPEG_LIBJPEG = 0,
    PATINA_JPEG_NVJPEG = 1,
    PATINA_JPEG_EXACT_GPU = 2,
    PATINA_JPEG_AUTO = 3
} patina_jpeg_decoder;

/* 1 when nvJPEG can be loaded at run time with the context's nvjpeg_library
 * setting (ctx NULL: the default names); why (may be NULL) gets the
 * library's name or the reason it cannot be used. */
PATINA_API int patina_jpeg_gpu_available(const patina_context_t *ctx, char *why, size_t size);

/* Opens the context's nvJPEG decoders now rather than in the first
 * patina_index_files call that asks for them (creating them takes a large
 * fraction of a second; they stay open until patina_context_free). */
PATINA_API patina_status patina_jpeg_gpu_prepare(patina_context_t *ctx);

/* Parses "libjpeg", "nvjpeg", "exact-gpu" or "auto". */
PATINA_API patina_status patina_jpeg_decoder_parse(patina_jpeg_decoder *d, const char *name);

/* Default of patina_index_opts_t.batch_memory and patina_load_opts_t.batch_memory. */
#define PATINA_DEFAULT_BATCH_MEMORY (1ull << 30) /* 1 GiB */

typedef void (*patina_file_report_fn)(void *user, const char *path, patina_status s, const char *message);

typedef struct patina_index_opts {
    patina_device device;    /* default AUTO */
    int jobs;                /* decode workers; 0 = context threads */
    size_t batch;            /* images per extraction batch and transaction, <= PATINA_BATCH_MAX;
                              * 0 = PATINA_BATCH_DEFAULT */
    /* Bytes of images the pipeline holds at once: encoded file bytes plus
     * decoded pixels (3 bytes each) of every batch in flight (two with the
     * GPU, which extracts one while the CPU decodes the next). A batch is cut
     * where the next image would pass its share; a single image larger than
     * the share still forms a batch of one (patina_limits_t bounds it).
     * 0 = PATINA_DEFAULT_BATCH_MEMORY. */
    uint64_t batch_memory;
    int strict;              /* decoder warnings fail the file (PATINA_E_CORRUPT) */
    int skip_duplicates;     /* a duplicate (see above) is reported and not indexed */
    /* Called from the calling thread after each batch (may be NULL). */
    void (*progress)(void *user, const patina_index_stats_t *s);
    /* Called once per failed file, from the calling thread (may be NULL);
     * the message names the file. */
    patina_file_report_fn on_error;
    /* Called once per file decoded with a decoder warning (not when strict:
     * the file fails and on_error says why), from the calling thread (may be
     * NULL); the message names the file. */
    patina_file_report_fn on_warning;
    /* Called once per duplicate, from the calling thread (may be NULL); the
     * message names both keys. */
    patina_file_report_fn on_duplicate;
    void *user;
    patina_jpeg_decoder jpeg_decoder; /* default PATINA_JPEG_AUTO (zeroed options: LIBJPEG) */
    /* With nvJPEG: the fraction of each batch's JPEGs it decodes while the
     * CPU workers decode the rest. 0 = all it supports (the default);
     * negative = adapt the share to the rates measured per batch. Which is
     * faster where: docs/images.md, "JPEG on the GPU". */
    double nvjpeg_share;
    /* 1: JPEGs are turned upright by their EXIF Orientation tag before
     * extraction (patina_decode_opts_t.apply_orientation; those not stored
     * upright are decoded on the CPU). Default 0: pixels as stored (LIRE's). */
    int apply_orientation;
    /* Video files and "-" (standard input as a video stream; docs/video.md):
     * which frames are indexed (patina_video_opts_t: every frame, one every
     * N frames, one every S milliseconds; with shots > 0 only shot changes)
     * and the key of the stream on standard input (NULL: "stdin"). Each
     * kept frame is a record keyed "FILEKEY#t=SECONDS&f=FRAME". */
    uint64_t video_every_frames;
    uint64_t video_every_ms;
    double video_shots;
    const char *stdin_key;
    /* Who decodes video frames (patina_video_decoder: CPU, NVDEC or AUTO;
     * default CPU); NVDEC runs on the context's GPU. */
    int video_decoder;
    /* A video's batch of frames is stored when it is full (batch frames or
     * its memory share), at the stream's end, or at the latest this many
     * milliseconds after its first frame was decoded, even while the
     * reader waits for the next frame: a live stream's frames are
     * searchable within about this delay plus one batch's storing.
     * 1 .. 3,600,000; 0 = the default, 1000. */
    uint64_t video_max_delay_ms;
} patina_index_opts_t;

/* Fills opts with the defaults (every field above at its documented default,
 * callbacks NULL): the table of include/patina/options.h, set
 * PATINA_OPTIONS_INDEX. patina_index_files checks opts against it. */
PATINA_API void patina_index_opts_init(patina_index_opts_t *opts);

/* What a folder walk takes (patina_walk). Files named in the paths are
 * always taken; a file a walk reaches in a folder is taken when
 *  - no exclude pattern matches it, and
 *  - an include pattern matches it, when there are include patterns, and
 *  - an image loader recognises its first 16 bytes (JPEG, PNG, Netpbm:
 *    patina_format_sniff; the name does not matter), unless all_files.
 * Patterns are fnmatch(3) globs, matched case-insensitively against the
 * path below the walked folder ("2024/img.jpg") and against the base name
 * ("img.jpg"); '*' also matches '/'. A folder matching an exclude pattern
 * is not entered. Pattern lists are borrowed. */
typedef struct patina_walk_opts {
    const char *const *include;
    size_t ninclude;
    const char *const *exclude;
    size_t nexclude;
    int all_files;                     /* take every regular file (no sniffing) */
    patina_file_report_fn on_error;    /* paths that cannot be used (may be NULL) */
    patina_file_report_fn on_other;    /* files the walk leaves out, with why (may be NULL) */
    void *user;
} patina_walk_opts_t;

typedef struct patina_walk_stats {
    size_t skipped;  /* paths that could not be used (each reported through on_error) */
    size_t others;   /* files a folder walk left out (not images, or by the patterns) */
} patina_walk_stats_t;

/* Fills opts with the defaults: no patterns, images only, no callbacks. */
PATINA_API void patina_walk_opts_init(patina_walk_opts_t *opts);

/* patina_expand_paths with options (opts NULL: the defaults); stats (may
 * be NULL) receives the counts. */
PATINA_API patina_status patina_walk(char ***files, size_t *n, const char *const *paths, size_t npaths,
                                     const patina_walk_opts_t *opts, patina_walk_stats_t *stats);

/* Expands paths (files and directories) into a list of files; *files is
 * malloc'd with malloc'd strings (free each, then the array). This is
 * patina_walk with the default options: folder walks take the files an
 * image loader recognises and leave the others out silently (not counted
 * in *skipped).
 *
 * Directories are walked depth first, entries of each in byte order of
 * their names; hidden entries (names starting with '.') are skipped;
 * symbolic links are followed. Every directory is visited once and every
 * file listed once, both recognised by device and inode, so symbolic link
 * loops end and a file reached by several paths (links, hard links, a path
 * given twice) is listed under the first path the walk reaches. Sockets,
 * FIFOs and devices are left out silently.
 *
 * A path that cannot be used is skipped, reported once through on_error (if
 * given) with a message naming it, and counted in *skipped (may be NULL): a
 * path given that does not exist or cannot be accessed (PATINA_E_NOTFOUND /
 * PATINA_E_IO), a directory that cannot be opened or read, an entry that
 * cannot be examined, a broken symbolic link, a directory nested deeper than
 * 256 levels (PATINA_E_IO / PATINA_E_LIMIT). The walk goes on after each.
 * Fails only when out of memory (nothing is returned then). */
PATINA_API patina_status patina_expand_paths(char ***files, size_t *n, const char *const *paths,
                                             size_t npaths, size_t *skipped,
                                             patina_file_report_fn on_error, void *user);

/* Indexes files into the collection with the extractor. Returns PATINA_OK
 * when the run completed (stats->failed says how many files failed), or the
 * status of an error that stopped the whole run (store full, GPU failure). */
PATINA_API patina_status patina_index_files(patina_context_t *ctx, patina_collection_t *c,
                                            const patina_extractor_t *ex, const char *const *files,
                                            size_t n, const patina_index_opts_t *opts,
                                            patina_index_stats_t *stats);

/* ------------------------------------------------------- parallel loading */

typedef struct patina_load_opts {
    int strict;              /* decoder warnings fail the file (PATINA_E_CORRUPT) */
    uint64_t batch_memory;   /* bytes of encoded plus decoded images one call may hold;
                                0 = PATINA_DEFAULT_BATCH_MEMORY */
    int apply_orientation;   /* JPEGs turned by their EXIF orientation (patina_decode_opts_t) */
} patina_load_opts_t;

/* Fills opts with the defaults: not strict, the default batch memory, pixels
 * as stored. */
PATINA_API void patina_load_opts_init(patina_load_opts_t *opts);

#define PATINA_ERROR_MAX 1024

/* How one file fared in patina_load_files. */
typedef struct patina_load_result {
    patina_status status;            /* PATINA_OK: the image was decoded */
    char error[PATINA_ERROR_MAX];    /* when not OK: the message, naming the file */
    patina_decode_report_t report;   /* decoder warnings (also when strict made them errors) */
} patina_load_result_t;

/* Reads and decodes files in parallel on the context's workers, with the
 * context's limits. Loads a prefix of paths[0 .. n): as many files as fit in
 * opts->batch_memory (encoded bytes, then decoded pixels x 3), at least one;
 * *taken says how many (0 only when n is 0). For each i < *taken,
 * images[i] holds the image (release it with patina_image_release) when
 * results[i].status is PATINA_OK, and is empty otherwise. Fails as a whole
 * only for bad arguments. opts may be NULL for the defaults. Calls on one
 * context must not overlap (the workers run one job at a time). */
PATINA_API patina_status patina_load_files(patina_context_t *ctx, patina_image_t *images,
                                           patina_load_result_t *results, size_t *taken,
                                           const char *const *paths, size_t n,
                                           const patina_load_opts_t *opts);

/* ------------------------------------------------------- describing inputs */

/* One input of patina_extract_files: a file, or encoded bytes in memory. */
typedef struct patina_input {
    const char *path;   /* the file to read (it names the input in messages); NULL: the bytes below */
    const void *data;   /* path NULL: the encoded image data[0 .. size), borrowed for the call */
    size_t size;
    const char *name;   /* bytes: their name in messages (NULL: "<memory>"); unused for a file */
} patina_input_t;

/* How one input fared in patina_extract_files. */
typedef struct patina_extract_result {
    patina_status status;            /* PATINA_OK: read, decoded and described by every extractor */
    char error[PATINA_ERROR_MAX];    /* when not OK: the first failure (read, decode, an extractor),
                                        naming the input */
    patina_decode_report_t report;   /* decoder warnings (also when strict made them errors) */
    int width, height;               /* the decoded image's size (0 x 0 when it was not decoded) */
    int gpu_decoded;                 /* 1: decoded on the GPU (its pixels never came to the host) */
} patina_extract_result_t;

/* Reads, decodes and describes a prefix of in[0 .. n) with the nex
 * extractors ex[], on the context's workers and device, decoding as
 * patina_index_files does: opts (NULL: patina_index_opts_init's defaults)
 * gives device, jpeg_decoder, nvjpeg_share, strict, batch_memory and
 * apply_orientation; the rest is unused. With jpeg_decoder exact-gpu on a
 * GPU run whose extractors all take device images, JPEGs are decoded on the
 * GPU, byte-identical to the CPU path, and never come to the host; what
 * that decoder does not take, and every other format, is decoded on the CPU.
 * Takes as many inputs as fit in batch_memory (at least one): *taken.
 * descs[e] receives (*taken, patina_extractor_bytes(ex[e])) records in input
 * order (zeros for a failed input); results[i] says how input i fared.
 * Returns PATINA_OK when the call ran (results say which inputs failed), or
 * the error that stopped it (the device, memory: nothing taken). Calls on
 * one context take turns. */
PATINA_API patina_status patina_extract_files(patina_context_t *ctx, const patina_extractor_t *const *ex,
                                              size_t nex, void *const *descs, patina_extract_result_t *results,
                                              size_t *taken, const patina_input_t *in, size_t n,
                                              const patina_index_opts_t *opts);

#ifdef __cplusplus
}
#endif
#endif
