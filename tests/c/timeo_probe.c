/* SO_RCVTIMEO and SO_SNDTIMEO, as a C program sets them: the rack's native interposer
 * and the stub's options under test (splitrack/guest/sockopts.py).
 *
 *   timeo_probe IP PORT   connect to (IP, PORT), a server that neither sends nor
 *                         reads; SO_RCVTIMEO 0.3 s: getsockopt gives it back, and a
 *                         recv fails with EAGAIN; SO_SNDTIMEO 0.3 s: a 64 MiB send
 *                         returns a count short of it; print "ok"
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static void fail(const char *what)
{
    fprintf(stderr, "timeo_probe: %s: %s\n", what, strerror(errno));
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: timeo_probe IP PORT\n");
        return 2;
    }
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &to.sin_addr);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&to, sizeof to) < 0)
        fail("connect");
    struct timeval wait = {0, 300000}, got = {0, 0};
    socklen_t len = sizeof got;
    if (setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait) < 0)
        fail("setsockopt SO_RCVTIMEO");
    if (getsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &got, &len) < 0)
        fail("getsockopt SO_RCVTIMEO");
    if (len != sizeof got || got.tv_sec != 0 || got.tv_usec != 300000) {
        fprintf(stderr, "timeo_probe: SO_RCVTIMEO reads back %ld.%06ld (%u bytes)\n",
                (long)got.tv_sec, (long)got.tv_usec, len);
        return 1;
    }
    char byte;
    if (recv(s, &byte, 1, 0) != -1 || errno != EAGAIN)
        fail("recv past SO_RCVTIMEO: not EAGAIN");
    if (setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof wait) < 0)
        fail("setsockopt SO_SNDTIMEO");
    size_t big = 64 << 20;
    char *data = calloc(big, 1);
    ssize_t sent = data ? send(s, data, big, MSG_NOSIGNAL) : -1;
    if (sent <= 0 || (size_t)sent >= big)
        fail("send past SO_SNDTIMEO: not a short count");
    printf("ok\n");
    return 0;
}
