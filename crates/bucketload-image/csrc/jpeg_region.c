/*
 * Region decode of JPEG through libjpeg-turbo's libjpeg API, for bucketload-image.
 *
 * libjpeg reports fatal errors by calling error_exit, which must not return; the only
 * portable way out is longjmp. That cannot cross Rust frames, so every libjpeg call sits
 * in this file, behind setjmp, and Rust sees two plain functions that return a status and
 * a message (src/turbo.rs).
 *
 * bl_jpeg_decode decodes only the rows and columns of a region, at a DCT scale of M/8:
 * jpeg_crop_scanline skips the IDCT, upsampling and colour conversion of the iMCU columns
 * left and right of the region; jpeg_skip_scanlines skips the IDCT and colour conversion of
 * the rows above it (their entropy-coded data is still read); the rows below it are never
 * read at all.
 */
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

enum { BL_OK = 0, BL_ERROR = 1, BL_UNSUPPORTED = 2 };

typedef struct {
    unsigned int width;
    unsigned int height;
    /* 1: grayscale, 3: YCbCr or RGB (decoded here), 4: CMYK or YCCK (not decoded here). */
    unsigned int components;
} bl_header;

typedef struct {
    /* Region wanted, in the coordinates of the image scaled by scale_num / 8. */
    unsigned int x, y, width, height;
    /* DCT scaling numerator, 1..=8 (denominator 8). */
    unsigned int scale_num;
} bl_request;

typedef struct {
    /* Region decoded (it covers the request: columns are widened to iMCU boundaries). */
    unsigned int x, y, width, height;
    /* Size of the whole image at this scale. */
    unsigned int scaled_width, scaled_height;
} bl_region;

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char *message;
    size_t message_len;
} bl_error;

static void bl_error_exit(j_common_ptr cinfo) {
    bl_error *err = (bl_error *)cinfo->err;
    char buffer[JMSG_LENGTH_MAX];
    (*cinfo->err->format_message)(cinfo, buffer);
    snprintf(err->message, err->message_len, "%s", buffer);
    longjmp(err->jump, 1);
}

/* Warnings that mean entropy-coded data is missing or damaged are errors (as a truncated
 * stream is in Pillow and zune-jpeg's strict mode), not grey pixels; others (extra bytes
 * between markers, odd metadata) are ignored as Pillow ignores them. */
static void bl_emit_message(j_common_ptr cinfo, int level) {
    if (level >= 0) {
        return;
    }
    switch (cinfo->err->msg_code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
        bl_error_exit(cinfo);
        break;
    default:
        break;
    }
}

static void bl_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void bl_init(struct jpeg_decompress_struct *cinfo, bl_error *err, char *message,
                    size_t message_len) {
    cinfo->err = jpeg_std_error(&err->pub);
    err->pub.error_exit = bl_error_exit;
    err->pub.emit_message = bl_emit_message;
    err->pub.output_message = bl_output_message;
    err->message = message;
    err->message_len = message_len;
    if (message_len > 0) {
        message[0] = 0;
    }
}

int bl_jpeg_header(const unsigned char *data, size_t len, bl_header *header, char *message,
                   size_t message_len) {
    struct jpeg_decompress_struct cinfo;
    bl_error err;
    bl_init(&cinfo, &err, message, message_len);
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        return BL_ERROR;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    header->width = cinfo.image_width;
    header->height = cinfo.image_height;
    header->components = (unsigned int)cinfo.num_components;
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        header->components = 4;
    }
    jpeg_destroy_decompress(&cinfo);
    return BL_OK;
}

/* Rows handed to jpeg_read_scanlines at once: libjpeg produces at most one iMCU row
 * (16 rows at full scale) per call, so more would not be used. */
#define BL_BATCH_ROWS 16

int bl_jpeg_decode(const unsigned char *data, size_t len, const bl_request *request,
                   unsigned char *out, size_t out_len, bl_region *region, char *message,
                   size_t message_len) {
    struct jpeg_decompress_struct cinfo;
    bl_error err;
    bl_init(&cinfo, &err, message, message_len);
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        return BL_ERROR;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&cinfo);
        return BL_UNSUPPORTED;
    }
    cinfo.out_color_space = JCS_RGB;
    cinfo.scale_num = request->scale_num;
    cinfo.scale_denom = 8;
    jpeg_start_decompress(&cinfo);
    region->scaled_width = cinfo.output_width;
    region->scaled_height = cinfo.output_height;
    if (request->width == 0 || request->height == 0 ||
        request->x >= cinfo.output_width || request->y >= cinfo.output_height ||
        request->width > cinfo.output_width - request->x ||
        request->height > cinfo.output_height - request->y) {
        snprintf(message, message_len, "region %ux%u at (%u, %u) outside the %ux%u image",
                 request->width, request->height, request->x, request->y,
                 cinfo.output_width, cinfo.output_height);
        jpeg_destroy_decompress(&cinfo);
        return BL_ERROR;
    }
    JDIMENSION x = request->x, width = request->width;
    if (width < cinfo.output_width) {
        jpeg_crop_scanline(&cinfo, &x, &width);
    }
    JDIMENSION stride = cinfo.output_width * 3;
    if ((size_t)stride * request->height > out_len) {
        snprintf(message, message_len, "output buffer of %zu bytes too small", out_len);
        jpeg_destroy_decompress(&cinfo);
        return BL_ERROR;
    }
    if (request->y > 0) {
        jpeg_skip_scanlines(&cinfo, request->y);
    }
    JDIMENSION end = request->y + request->height;
    while (cinfo.output_scanline < end) {
        JSAMPROW rows[BL_BATCH_ROWS];
        JDIMENSION first = cinfo.output_scanline, count = end - first;
        if (count > BL_BATCH_ROWS) {
            count = BL_BATCH_ROWS;
        }
        for (JDIMENSION i = 0; i < count; i++) {
            rows[i] = out + (size_t)(first - request->y + i) * stride;
        }
        if (jpeg_read_scanlines(&cinfo, rows, count) == 0) {
            snprintf(message, message_len, "decoder stopped at row %u", first);
            jpeg_destroy_decompress(&cinfo);
            return BL_ERROR;
        }
    }
    region->x = x;
    region->y = request->y;
    region->width = cinfo.output_width;
    region->height = request->height;
    /* The rows below the region are not needed: abort instead of finishing. */
    jpeg_destroy_decompress(&cinfo);
    return BL_OK;
}
