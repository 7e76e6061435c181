/*
 * fitheader.h -- the FIT header as the C parts read and write it
 * (fit_rpc/header.py: "<HBBHHIIII", 24 bytes, little-endian), for the
 * nComponent's data plane (skelpath.c, skelconnect.c) and a served
 * message's common case (fitserve.c). Only the C files
 * include it; header.py is the layout's statement, this its copy in C.
 */
#ifndef SPLITRACK_FITHEADER_H
#define SPLITRACK_FITHEADER_H

#include <stdint.h>

typedef struct __attribute__((packed)) {
    uint16_t magic;
    uint8_t version, kind;
    uint16_t op, err;
    uint32_t seq, length, trace, event;
} fit_header;

#define HEADER_BYTES 24

_Static_assert(sizeof(fit_header) == HEADER_BYTES, "the FIT header is 24 bytes");

#endif
