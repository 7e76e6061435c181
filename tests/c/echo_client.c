/* A TCP echo client, as a C program: the rack's native interposer under test.
 *
 *   echo_client IP PORT BYTES CHUNK      send BYTES (a fixed pseudo-random
 *                                        stream) CHUNK at a time, read each
 *                                        chunk's echo, check every byte; print
 *                                        "ok BYTES CHECKSUM"
 *   echo_client IP PORT --rtt N SIZE     N round trips of SIZE bytes; print
 *                                        "rtt_us p50 p99"
 *   echo_client IP PORT --pieces N SIZE  send N pieces of SIZE bytes at once (no
 *                                        TCP_NODELAY: the rack may hold them back
 *                                        and send them together), then poll() for
 *                                        their echo, at most 10 s a wait; print
 *                                        "pieces ok"
 *   echo_client IP PORT --polled-pieces N SIZE
 *                                        the same after a poll() that finds
 *                                        nothing (the program polls before it
 *                                        sends)
 *
 * IP may be IPv6 (it has a ':'). Exit 0 if all came back as sent, 1 otherwise
 * (with what differed, or the call that failed and its errno).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void fail(const char *what)
{
    fprintf(stderr, "echo_client: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void read_all(int fd, char *buf, size_t n)
{
    for (size_t at = 0; at < n;) {
        ssize_t k = recv(fd, buf + at, n - at, 0);
        if (k <= 0)
            k == 0 ? (fprintf(stderr, "echo_client: EOF after %zu of %zu\n", at, n), exit(1))
                   : fail("recv");
        at += (size_t)k;
    }
}

static void write_all(int fd, const char *buf, size_t n)
{
    for (size_t at = 0; at < n;) {
        ssize_t k = send(fd, buf + at, n - at, MSG_NOSIGNAL);
        if (k < 0)
            fail("send");
        at += (size_t)k;
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: echo_client IP PORT BYTES CHUNK | IP PORT --rtt N SIZE | "
                        "IP PORT --pieces N SIZE | IP PORT --polled-pieces N SIZE\n");
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    struct sockaddr_in6 addr6 = {.sin6_family = AF_INET6, .sin6_port = addr.sin_port};
    int six = strchr(argv[1], ':') != NULL, one = 1;
    inet_pton(six ? AF_INET6 : AF_INET, argv[1], six ? (void *)&addr6.sin6_addr : &addr.sin_addr);
    int fd = socket(six ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        fail("socket");
    int polled = strcmp(argv[3], "--polled-pieces") == 0;
    int pieces = polled || strcmp(argv[3], "--pieces") == 0;
    if (!pieces)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if ((six ? connect(fd, (struct sockaddr *)&addr6, sizeof addr6)
             : connect(fd, (struct sockaddr *)&addr, sizeof addr)) < 0)
        fail("connect");

    if (strcmp(argv[3], "--rtt") == 0) {
        int n = atoi(argv[4]);
        size_t size = (size_t)atol(argv[5]);
        char *buf = calloc(1, size);
        double *us = calloc((size_t)n, sizeof *us);
        for (int i = 0; i < n; i++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            write_all(fd, buf, size);
            read_all(fd, buf, size);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            us[i] = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3;
        }
        qsort(us, (size_t)n, sizeof *us, cmp);
        printf("rtt_us %.1f %.1f\n", us[n / 2], us[n * 99 / 100]);
        close(fd);
        return 0;
    }

    if (pieces) {
        size_t n = (size_t)atol(argv[4]), size = (size_t)atol(argv[5]), at = 0;
        char *buf = malloc(n * size), *in = malloc(n * size);
        for (size_t i = 0; i < n * size; i++)
            buf[i] = (char)(i / size);
        struct pollfd quiet = {.fd = fd, .events = POLLIN};
        if (polled && poll(&quiet, 1, 0) != 0)
            fail("the first poll");
        for (size_t i = 0; i < n; i++)
            write_all(fd, buf + i * size, size);
        while (at < n * size) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            int r = poll(&p, 1, 10000);
            if (r < 0)
                fail("poll");
            if (r == 0) {
                fprintf(stderr, "echo_client: poll timed out, %zu of %zu bytes back\n", at,
                        n * size);
                return 1;
            }
            ssize_t k = recv(fd, in + at, n * size - at, 0);
            if (k <= 0)
                k == 0 ? (fprintf(stderr, "echo_client: EOF after %zu\n", at), exit(1))
                       : fail("recv");
            at += (size_t)k;
        }
        if (memcmp(buf, in, n * size) != 0) {
            fprintf(stderr, "echo_client: the pieces came back changed\n");
            return 1;
        }
        close(fd);
        printf("pieces ok\n");
        return 0;
    }

    size_t total = (size_t)atol(argv[3]), chunk = (size_t)atol(argv[4]);
    char *out = malloc(chunk), *in = malloc(chunk);
    uint32_t x = 2463534242u, sum = 2166136261u;   /* xorshift stream, FNV-1a checksum */
    for (size_t done = 0; done < total;) {
        size_t n = total - done < chunk ? total - done : chunk;
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            out[i] = (char)x;
        }
        write_all(fd, out, n);
        read_all(fd, in, n);
        if (memcmp(out, in, n) != 0) {
            fprintf(stderr, "echo_client: bytes %zu..%zu came back changed\n", done, done + n);
            return 1;
        }
        for (size_t i = 0; i < n; i++)
            sum = (sum ^ (uint8_t)in[i]) * 16777619u;
        done += n;
    }
    if (shutdown(fd, SHUT_WR) < 0)
        fail("shutdown");
    char tail;
    if (recv(fd, &tail, 1, 0) != 0) {
        fprintf(stderr, "echo_client: no EOF after the echo\n");
        return 1;
    }
    close(fd);
    printf("ok %zu %08x\n", total, sum);
    return 0;
}
