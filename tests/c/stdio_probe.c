/* stdio on a rack socket, as a C program: the rack's native interposer under test
 * (native/preload_stdio.c).
 *
 *   stdio_probe IP PORT   connect to (IP, PORT); fdopen the socket "r+"; fprintf a
 *                         line to it, then dprintf one to its descriptor (in that
 *                         order: the stream flushed first); wait until ioctl
 *                         FIONREAD says the server's 1000-byte answer is all there
 *                         (native/preload_fd.c: the stub's count, not its bell's);
 *                         fgets it; fileno() must name the socket; fclose() must
 *                         close it; print "ok " and the answer's length
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static void fail(const char *what)
{
    fprintf(stderr, "stdio_probe: %s: %s\n", what, strerror(errno));
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: stdio_probe IP PORT\n");
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &addr.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0)
        fail("connect");
    FILE *f = fdopen(fd, "r+");
    if (!f)
        fail("fdopen");
    if (fileno(f) != fd)
        fail("fileno");
    if (fprintf(f, "fprintf %d\n", 42) < 0 || fflush(f) != 0)
        fail("fprintf");
    if (dprintf(fd, "dprintf %s\n", "too") != 12)
        fail("dprintf");
    for (int waited = 0, n = 0; n != 1000; waited++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 5000) != 1 || ioctl(fd, FIONREAD, &n) != 0)
            fail("poll or FIONREAD");
        if (n < 0 || n > 1000 || waited > 5000) {
            errno = ERANGE;
            fail("FIONREAD: not the answer's bytes");
        }
        if (n != 1000)
            usleep(1000);
    }
    char line[2000];
    if (!fgets(line, sizeof line, f))
        fail("fgets");
    if (fclose(f) != 0)
        fail("fclose");
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF)
        fail("the socket after fclose: still open");
    printf("ok %zu\n", strlen(line));
    return 0;
}
