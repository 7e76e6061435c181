/* sendfile, splice and the multi-message calls, as a C program: the rack's native
 * interposer under test (native/preload_copy.c).
 *
 *   copy_probe stream IP PORT FILE   connect to (IP, PORT); send FILE: its first
 *                                    third by sendfile with an offset (the file's
 *                                    position must stay 0), the rest by sendfile
 *                                    without one (its position must end at the
 *                                    file's size); then "abcdef" by one sendmmsg of
 *                                    three messages; a splice from a pipe into the
 *                                    socket must fail with EINVAL; print "ok BYTES"
 *   copy_probe dgram IP              bind UDP to (IP, 0), print "listening PORT";
 *                                    once readable, FIONREAD must be the first
 *                                    datagram's size (3); recvmmsg
 *                                    (MSG_WAITFORONE) until 3 datagrams came,
 *                                    send them back to their senders with one
 *                                    sendmmsg; print "ok 3"
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static void fail(const char *what)
{
    fprintf(stderr, "copy_probe: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void sendfile_all(int out, int in, off_t *offset, size_t count)
{
    while (count) {
        ssize_t n = sendfile(out, in, offset, count);
        if (n <= 0)
            fail("sendfile");
        count -= (size_t)n;
    }
}

static int stream(const struct sockaddr_in *addr, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), file = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || file < 0 || fstat(file, &st) < 0)
        fail("socket or file");
    if (connect(fd, (const struct sockaddr *)addr, sizeof *addr) < 0)
        fail("connect");
    size_t size = (size_t)st.st_size, third = size / 3;
    off_t at = 0;
    sendfile_all(fd, file, &at, third);
    if (at != (off_t)third || lseek(file, 0, SEEK_CUR) != 0)
        fail("sendfile with an offset: offsets");
    if (lseek(file, (off_t)third, SEEK_SET) < 0)
        fail("lseek");
    sendfile_all(fd, file, NULL, size - third);
    if (lseek(file, 0, SEEK_CUR) != (off_t)size)
        fail("sendfile without an offset: the file's position");
    struct iovec parts[3] = {{"ab", 2}, {"cd", 2}, {"ef", 2}};
    struct mmsghdr msgs[3];
    memset(msgs, 0, sizeof msgs);
    for (int i = 0; i < 3; i++) {
        msgs[i].msg_hdr.msg_iov = &parts[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    if (sendmmsg(fd, msgs, 3, 0) != 3 || msgs[0].msg_len != 2 || msgs[2].msg_len != 2)
        fail("sendmmsg");
    int pipefd[2];
    if (pipe(pipefd) < 0 || write(pipefd[1], "x", 1) != 1)
        fail("pipe");
    errno = 0;
    if (splice(pipefd[0], NULL, fd, NULL, 1, 0) != -1 || errno != EINVAL)
        fail("splice into a rack socket: not EINVAL");
    char left;
    if (read(pipefd[0], &left, 1) != 1 || left != 'x')   /* refused: nothing taken */
        fail("the pipe's byte");
    printf("ok %zu\n", size + 6);
    return close(fd);
}

static int dgram(struct sockaddr_in *addr)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    socklen_t len = sizeof *addr;
    if (fd < 0 || bind(fd, (struct sockaddr *)addr, sizeof *addr) < 0 ||
        getsockname(fd, (struct sockaddr *)addr, &len) < 0)
        fail("socket");
    printf("listening %d\n", ntohs(addr->sin_port));
    fflush(stdout);
    static char bufs[3][2048];
    struct iovec iov[3];
    struct sockaddr_in from[3];
    struct mmsghdr msgs[3];
    memset(msgs, 0, sizeof msgs);
    for (int i = 0; i < 3; i++) {
        iov[i] = (struct iovec){bufs[i], sizeof bufs[i]};
        msgs[i].msg_hdr = (struct msghdr){.msg_name = &from[i], .msg_namelen = sizeof from[i],
                                          .msg_iov = &iov[i], .msg_iovlen = 1};
    }
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int first = -1;
    if (poll(&p, 1, 30000) != 1 || ioctl(fd, FIONREAD, &first) != 0)
        fail("poll or FIONREAD");
    if (first != 3) {
        fprintf(stderr, "copy_probe: FIONREAD %d, not the first datagram's 3\n", first);
        exit(1);
    }
    for (int got = 0; got < 3;) {
        int n = recvmmsg(fd, msgs + got, 3 - got, MSG_WAITFORONE, NULL);
        if (n <= 0)
            fail("recvmmsg");
        got += n;
    }
    for (int i = 0; i < 3; i++)
        iov[i].iov_len = msgs[i].msg_len;   /* each back whole, to its sender */
    if (sendmmsg(fd, msgs, 3, 0) != 3)
        fail("sendmmsg");
    printf("ok 3\n");
    return close(fd);
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "stream") == 0 && argc < 5)) {
        fprintf(stderr, "usage: copy_probe stream IP PORT FILE | dgram IP\n");
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons(argc > 3 ? atoi(argv[3]) : 0)};
    inet_pton(AF_INET, argv[2], &addr.sin_addr);
    return strcmp(argv[1], "stream") == 0 ? stream(&addr, argv[4]) : dgram(&addr);
}
