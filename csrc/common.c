/* Error helpers, the build description and memory release shared by all kernels. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

void hpcio_error_clear(hpcio_error *err)
{
    err->item = -1;
    err->offset = -1;
    err->sys_errno = 0;
    err->msg[0] = '\0';
}

hpcio_status hpcio_fail(hpcio_error *err, hpcio_status status, int64_t item,
                        int64_t offset, const char *fmt, ...)
{
    va_list ap;

    err->item = item;
    err->offset = offset;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return status;
}

void hpcio_free(void *p)
{
    free(p);
}

void hpcio_keep_freed_heap(size_t nbytes)
{
    /* Freed untouched: glibc maps a block this large on its own (past its initial 128 KiB
     * threshold) and, freeing it, raises its thresholds.  Only the block's header page is
     * touched.  volatile: a compiler may drop a malloc whose block is only freed. */
    void *volatile block = malloc(nbytes);

    free(block);
}

/* The build switches arrive as macros from setup.py; a build without them (e.g. a
 * hand-compiled test) still describes itself. */
#ifndef HPCIO_CFLAGS
#define HPCIO_CFLAGS ""
#endif

const char *hpcio_build_flags(void)
{
    return HPCIO_CFLAGS;
}

const char *hpcio_compiler(void)
{
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#else
    return "unknown C compiler";
#endif
}

const char *hpcio_simd(void)
{
    return ""
#if defined(__SSE2__)
        " __SSE2__"
#endif
#if defined(__SSE4_2__)
        " __SSE4_2__"
#endif
#if defined(__AVX__)
        " __AVX__"
#endif
#if defined(__AVX2__)
        " __AVX2__"
#endif
#if defined(__AVX512F__)
        " __AVX512F__"
#endif
#if defined(__BMI2__)
        " __BMI2__"
#endif
#if defined(__ARM_NEON)
        " __ARM_NEON"
#endif
#if defined(__ARM_FEATURE_SVE)
        " __ARM_FEATURE_SVE"
#endif
#if defined(__ALTIVEC__)
        " __ALTIVEC__"
#endif
        ;
}

int hpcio_build_debug(void)
{
#if defined(HPCIO_DEBUG) && HPCIO_DEBUG
    return 1;
#else
    return 0;
#endif
}

int hpcio_build_sanitize(void)
{
#if defined(HPCIO_SANITIZE) && HPCIO_SANITIZE
    return 1;
#else
    return 0;
#endif
}

const char *hpcio_kernels(void)
{
    return "bisect bijection_forward bijection_inverse bijection_forward_range "
           "offset_ranges gather batch_extents batch_gather pread_full pread_records read_extents "
           "readahead_start readahead_extents_start readahead_done readahead_finish start_writeback map_probe map_resident keep_freed_heap "
           "mds_column_offsets mds_column_lengths mds_column_copy mds_prefetch_values utf8_lengths "
           "json_scan json_fill json_wide_int scan_lines tar_parse_header tar_scan jinx_footer "
           "a85_encode a85_decode a85_decoded_size "
           "zstd_content_size zstd_decode_fd zstd_decode_known zstd_decode_stream zstd_decode_stream_many "
           "zstd_compress blosc2_content_size blosc2_decode_known blosc2_compress";
}
