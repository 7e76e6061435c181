/* A UDP echo, as a C program: the rack's native interposer under test.
 *
 *   udp_echo server IP PORT           print "listening PORT", then echo every
 *                                     datagram to its sender until one says "quit"
 *   udp_echo client IP PORT COUNT [FROM]   send COUNT datagrams of sizes 0..9000
 *                                     on a connected socket (bound to FROM, if
 *                                     given), check each echo whole and in order;
 *                                     print "ok COUNT CHECKSUM"; then send "quit"
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void fail(const char *what)
{
    fprintf(stderr, "udp_echo: %s: %s\n", what, strerror(errno));
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: udp_echo server IP PORT | client IP PORT COUNT\n");
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
    inet_pton(AF_INET, argv[2], &addr.sin_addr);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    static char buf[65536], out[65536];
    if (fd < 0)
        fail("socket");
    if (strcmp(argv[1], "server") == 0) {
        socklen_t len = sizeof addr;
        if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0)
            fail("bind");
        if (getsockname(fd, (struct sockaddr *)&addr, &len) < 0)
            fail("getsockname");
        printf("listening %d\n", ntohs(addr.sin_port));
        fflush(stdout);
        for (;;) {
            struct sockaddr_in from;
            socklen_t flen = sizeof from;
            ssize_t n = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &flen);
            if (n < 0)
                fail("recvfrom");
            if (n == 4 && memcmp(buf, "quit", 4) == 0)
                return 0;
            if (sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, flen) != n)
                fail("sendto");
        }
    }
    int count = argc > 4 ? atoi(argv[4]) : 100;
    uint32_t x = 88172645u, sum = 2166136261u;
    if (argc > 5) {
        struct sockaddr_in from = {.sin_family = AF_INET};
        inet_pton(AF_INET, argv[5], &from.sin_addr);
        if (bind(fd, (struct sockaddr *)&from, sizeof from) < 0)
            fail("bind");
    }
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0)
        fail("connect");
    for (int i = 0; i < count; i++) {
        size_t size = (size_t)(i * 997 % 9001);
        for (size_t k = 0; k < size; k++) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            out[k] = (char)x;
        }
        if (send(fd, out, size, 0) != (ssize_t)size)
            fail("send");
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0)
            fail("recv");
        if ((size_t)n != size || memcmp(buf, out, size) != 0) {
            fprintf(stderr, "udp_echo: datagram %d came back as %zd bytes, not %zu as sent\n",
                    i, n, size);
            return 1;
        }
        for (size_t k = 0; k < size; k++)
            sum = (sum ^ (uint8_t)buf[k]) * 16777619u;
    }
    send(fd, "quit", 4, 0);
    printf("ok %d %08x\n", count, sum);
    return 0;
}
