/* Tar header scanning: a member index (name, data offset, size) built from the headers
 * of a ustar/GNU/pax archive held in memory (usually an mmap), without extracting.
 *
 * Only the 512-byte header blocks are touched, so indexing a mapped shard costs one
 * page fault per member, not a read of the data. */
#include <string.h>

#include "internal.h"

#define BLOCK 512u

static int is_zero_block(const uint8_t *block)
{
    for (unsigned i = 0; i < BLOCK; i++)
        if (block[i])
            return 0;
    return 1;
}

/* Numeric header field: octal ASCII (leading spaces, NUL/space terminated) or, when the
 * top bit of the first byte is set, GNU base-256 big-endian (sizes of 8 GiB and more). */
static int parse_number(const uint8_t *field, size_t width, uint64_t *value)
{
    uint64_t v = 0;
    size_t i = 0;
    if (field[0] & 0x80) {
        if (field[0] != 0x80)
            return -1; /* negative or too large for 64 bits */
        for (i = 1; i < width; i++) {
            if (v >> 56)
                return -1;
            v = (v << 8) | field[i];
        }
        *value = v;
        return 0;
    }
    while (i < width && field[i] == ' ')
        i++;
    for (; i < width && field[i] >= '0' && field[i] <= '7'; i++) {
        if (v >> 61)
            return -1;
        v = (v << 3) | (uint64_t)(field[i] - '0');
    }
    if (i < width && field[i] != '\0' && field[i] != ' ')
        return -1;
    *value = v;
    return 0;
}

static size_t field_len(const uint8_t *field, size_t width)
{
    size_t n = 0;
    while (n < width && field[n])
        n++;
    return n;
}

hpcio_status hpcio_tar_parse_header(const uint8_t *block, uint64_t offset, hpcio_tar_header *out,
                                    hpcio_error *err)
{
    uint64_t stored, unsigned_sum = 0;
    int64_t signed_sum = 0;

    memset(out, 0, sizeof(*out));
    if (is_zero_block(block)) {
        out->end = 1;
        return HPCIO_OK;
    }
    for (unsigned i = 0; i < BLOCK; i++) {
        uint8_t c = (i >= 148 && i < 156) ? (uint8_t)' ' : block[i];
        unsigned_sum += c;
        signed_sum += (int8_t)c;
    }
    if (parse_number(block + 148, 8, &stored) != 0) {
        return hpcio_fail(err, HPCIO_E_CORRUPT, -1, (int64_t)offset,
                          "tar header checksum field is not an octal number");
    }
    /* Old writers summed signed chars; tarfile and GNU tar accept either sum. */
    if (stored != unsigned_sum && (int64_t)stored != signed_sum) {
        return hpcio_fail(err, HPCIO_E_CORRUPT, -1, (int64_t)offset,
                          "bad tar header checksum: stored %llu, computed %llu",
                          (unsigned long long)stored, (unsigned long long)unsigned_sum);
    }
    if (parse_number(block + 124, 12, &out->size) != 0) {
        return hpcio_fail(err, HPCIO_E_CORRUPT, -1, (int64_t)offset,
                          "tar header size field is not a number");
    }
    out->type = block[156] ? (char)block[156] : '0';
    /* POSIX ustar splits long paths into prefix "/" name; GNU headers use that area
     * for other fields, so the prefix is only read under the POSIX magic. */
    size_t n = field_len(block, 100), p = 0;
    if (memcmp(block + 257, "ustar\0", 6) == 0) {
        p = field_len(block + 345, 155);
        if (p) {
            memcpy(out->name, block + 345, p);
            out->name[p++] = '/';
        }
    }
    memcpy(out->name + p, block, n);
    out->name_len = (uint32_t)(p + n);
    out->name[out->name_len] = '\0';
    return HPCIO_OK;
}

/* The "path" and "size" records of a pax extended header ("<len> <key>=<value>\n"). */
static int parse_pax(const uint8_t *data, uint64_t len, const uint8_t **path, uint64_t *path_len,
                     uint64_t *size, int *has_size)
{
    uint64_t pos = 0;
    while (pos < len) {
        uint64_t rec = 0, q = pos;
        while (q < len && data[q] >= '0' && data[q] <= '9') {
            rec = rec * 10 + (uint64_t)(data[q] - '0');
            q++;
            if (rec > len)
                return -1;
        }
        if (q == pos || q >= len || data[q] != ' ' || rec == 0 || pos + rec > len ||
            data[pos + rec - 1] != '\n')
            return -1;
        const uint8_t *kv = data + q + 1, *end = data + pos + rec - 1;
        const uint8_t *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq)
            return -1;
        size_t klen = (size_t)(eq - kv);
        if (klen == 4 && memcmp(kv, "path", 4) == 0) {
            *path = eq + 1;
            *path_len = (uint64_t)(end - eq - 1);
        } else if (klen == 4 && memcmp(kv, "size", 4) == 0) {
            uint64_t v = 0;
            for (const uint8_t *c = eq + 1; c < end; c++) {
                if (*c < '0' || *c > '9' || v > UINT64_MAX / 10 - 1)
                    return -1;
                v = v * 10 + (uint64_t)(*c - '0');
            }
            *size = v;
            *has_size = 1;
        }
        pos += rec;
    }
    return 0;
}

static uint64_t padded(uint64_t size)
{
    return (size + BLOCK - 1) / BLOCK * BLOCK;
}

/* What GNU long-name and pax headers say of the member that follows them. */
typedef struct {
    const uint8_t *long_name, *pax_path;
    uint64_t long_len, pax_path_len, pax_size;
    int has_pax_size;
} pending_meta;

/* The caller's index arrays and how much of them is filled. */
typedef struct {
    hpcio_tar_member *members;
    size_t cap;
    uint8_t *names;
    uint64_t names_cap;
    size_t *count;
    uint64_t *names_len;
} member_index;

static hpcio_status check_header_room(uint64_t pos, uint64_t len, size_t count,
                                      hpcio_error *err)
{
    if (pos == len)
        return hpcio_fail(err, HPCIO_E_TRUNCATED, (int64_t)count, (int64_t)pos,
                          "tar archive ends without its end-of-archive blocks");
    if (len - pos < BLOCK)
        return hpcio_fail(err, HPCIO_E_TRUNCATED, (int64_t)count, (int64_t)pos,
                          "tar header truncated: expected 512 bytes, got %llu",
                          (unsigned long long)(len - pos));
    return HPCIO_OK;
}

/* Records a long-name ('L') or pax ('x') header's data [data, data + size) in meta. */
static int read_meta(int type, const uint8_t *data, uint64_t size, pending_meta *meta)
{
    if (type == 'x')
        return parse_pax(data, size, &meta->pax_path, &meta->pax_path_len, &meta->pax_size,
                         &meta->has_pax_size);
    meta->long_name = data;
    meta->long_len = size;
    while (meta->long_len && meta->long_name[meta->long_len - 1] == '\0')
        meta->long_len--;
    return 0;
}

/* Adds a regular file to the index under the name pax, a GNU long name or its header
 * gives, in that order; 0 when the index has no room for it. */
static int add_member(member_index *ix, const pending_meta *meta, const hpcio_tar_header *h,
                      uint64_t header_offset, uint64_t data, uint64_t size)
{
    const uint8_t *name = (const uint8_t *)h->name;
    uint64_t nlen = h->name_len;
    hpcio_tar_member *m;

    if (meta->pax_path) {
        name = meta->pax_path;
        nlen = meta->pax_path_len;
    } else if (meta->long_name) {
        name = meta->long_name;
        nlen = meta->long_len;
    }
    if (*ix->count == ix->cap || nlen > ix->names_cap - *ix->names_len)
        return 0;
    m = &ix->members[*ix->count];
    m->header_offset = header_offset;
    m->data_offset = data;
    m->size = size;
    m->name_offset = *ix->names_len;
    m->name_len = (uint32_t)nlen;
    memcpy(ix->names + *ix->names_len, name, (size_t)nlen);
    *ix->names_len += nlen;
    (*ix->count)++;
    return 1;
}

hpcio_status hpcio_tar_scan(const uint8_t *buf, uint64_t len, uint64_t start,
                            hpcio_tar_member *members, size_t cap, uint8_t *names,
                            uint64_t names_cap, size_t *count, uint64_t *names_len,
                            uint64_t *next, hpcio_error *err)
{
    member_index ix = {members, cap, names, names_cap, count, names_len};
    pending_meta meta = {0};
    uint64_t pos = start, member_start = start;
    hpcio_tar_header h;
    hpcio_status st;

    *count = 0;
    *names_len = 0;
    *next = start;
    for (;;) {
        if ((st = check_header_room(pos, len, *count, err)) != HPCIO_OK)
            return st;
        st = hpcio_tar_parse_header(buf + pos, pos, &h, err);
        if (st != HPCIO_OK) {
            err->item = (int64_t)*count;
            return st;
        }
        if (h.end) {
            *next = pos;
            return HPCIO_OK;
        }
        uint64_t size = h.size;
        if (h.type != 'L' && h.type != 'K' && h.type != 'x' && meta.has_pax_size)
            size = meta.pax_size;
        uint64_t data = pos + BLOCK;
        if (size > len - data) {
            return hpcio_fail(err, HPCIO_E_TRUNCATED, (int64_t)*count, (int64_t)pos,
                              "tar member data truncated: header promises %llu bytes, file has %llu",
                              (unsigned long long)size, (unsigned long long)(len - data));
        }
        uint64_t after = data + padded(size);
        if (after > len)
            after = len; /* a final member's padding may be missing; the next header check reports it */
        switch (h.type) {
        case 'L': /* GNU long name: the data is the name of the next member */
        case 'x':
            if (read_meta(h.type, buf + data, size, &meta) != 0)
                return hpcio_fail(err, HPCIO_E_CORRUPT, (int64_t)*count, (int64_t)pos,
                                  "malformed pax extended header");
            break;
        case 'K': /* GNU long link name: not needed for an index */
        case 'g': /* global pax header: applies to no single member */
            break;
        default:
            if ((h.type == '0' || h.type == '7')
                && !add_member(&ix, &meta, &h, member_start, data, size)) {
                *next = member_start;
                return HPCIO_E_BUFFER;
            }
            /* directories, links and devices carry no sample data */
            meta.long_name = meta.pax_path = NULL;
            meta.has_pax_size = 0;
            member_start = after;
            break;
        }
        pos = after;
    }
}
