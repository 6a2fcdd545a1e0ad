/* Tar member index (tar.c) as hpcio/_core/_tar.pyx drives it, with tiny member and name
 * buffers so that every resume after HPCIO_E_BUFFER is taken.  The first input byte, when
 * odd, asks for the header checksums to be recomputed first, so mutations reach the
 * parsing behind the checksum. */
#include "fuzz_input.h"

#define BLOCK 512

static void fix_checksums(uint8_t *buf, size_t len)
{
    for (size_t at = 0; at + BLOCK <= len; at += BLOCK) {
        uint8_t *b = buf + at;
        unsigned sum = 0;

        for (int i = 0; i < BLOCK; i++)
            sum += (i >= 148 && i < 156) ? ' ' : b[i];
        if (sum == 8 * ' ')
            continue; /* an all-zero block stays the end marker */
        snprintf((char *)b + 148, 8, "%06o", sum & 0777777);
        b[155] = ' ';
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    const int fix = take_u8(&in) & 1;
    const size_t cap = 1 + take_u8(&in) % 4;
    const uint64_t names_cap = 1 + take_u16(&in) % 600;
    uint8_t *buf = malloc(in.n ? in.n : 1), *names = malloc(names_cap);
    hpcio_tar_member members[4];
    uint64_t start = 0, names_used = 0, next = 0;
    size_t count = 0;
    hpcio_error err;
    hpcio_status st;

    memcpy(buf, in.p, in.n);
    if (fix)
        fix_checksums(buf, in.n);
    for (size_t at = 0; at + BLOCK <= in.n; at += BLOCK) {
        hpcio_tar_header h;

        hpcio_error_clear(&err);
        st = hpcio_tar_parse_header(buf + at, at, &h, &err);
        check_status(st, &err);
        if (st == HPCIO_OK)
            FUZZ_CHECK(h.name_len <= 256 && h.name[h.name_len] == '\0');
    }
    for (int rounds = 0;; rounds++) {
        FUZZ_CHECK(rounds <= (int)(in.n / BLOCK) + 2); /* each resume moves forward */
        hpcio_error_clear(&err);
        st = hpcio_tar_scan(buf, in.n, start, members, cap, names, names_cap, &count,
                            &names_used, &next, &err);
        check_status(st, &err);
        FUZZ_CHECK(count <= cap && names_used <= names_cap);
        for (size_t j = 0; j < count; j++) {
            const hpcio_tar_member *m = &members[j];

            FUZZ_CHECK(m->header_offset >= start && m->header_offset < m->data_offset);
            FUZZ_CHECK(m->data_offset <= in.n && m->size <= in.n - m->data_offset);
            FUZZ_CHECK(m->name_offset + m->name_len <= names_used);
        }
        if (st != HPCIO_E_BUFFER)
            break;
        FUZZ_CHECK(count == 0 || next > start);
        if (count == 0)
            break; /* a name longer than the whole name buffer: the caller grows it */
        start = next;
    }
    free(buf);
    free(names);
    return 0;
}
