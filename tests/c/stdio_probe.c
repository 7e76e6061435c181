/* stdio on a rack socket, as a C program: the rack's native interposer under test
 * (native/preload_stdio.c).
 *
 *   stdio_probe filter    a line filter that knows nothing of sockets: each line of
 *                         stdin (fgets) written back to stdout in capitals (printf),
 *                         flushed, until EOF (an inetd-style server's program)
 *   stdio_probe IP PORT   connect to (IP, PORT); fdopen the socket "r+"; fprintf a
 *                         line to it, then dprintf one to its descriptor (in that
 *                         order: the stream flushed first); wait until ioctl
 *                         FIONREAD says the server's 1000-byte answer is all there
 *                         (native/preload_fd.c: the stub's count, not its bell's);
 *                         fgets it; fileno() must name the socket; a second
 *                         stream, of a dup, must close its descriptor at fclose()
 *                         (the connection stays); print "ok " and the answer's
 *                         length; fprintf "bye" and return from main without a
 *                         flush: exit() must send it, then close the connection
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void fail(const char *what)
{
    fprintf(stderr, "stdio_probe: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int filter(void)
{
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        for (char *c = line; *c; c++)
            *c = (char)toupper((unsigned char)*c);
        printf("%s", line);
        fflush(stdout);
    }
    return ferror(stdin) ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "filter") == 0)
        return filter();
    if (argc < 3) {
        fprintf(stderr, "usage: stdio_probe IP PORT | filter\n");
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
    time_t deadline = time(NULL) + 60;
    for (int n = 0; n != 1000;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 30000) != 1 || ioctl(fd, FIONREAD, &n) != 0)
            fail("poll or FIONREAD");
        if (n < 0 || n > 1000 || time(NULL) > deadline) {
            errno = ERANGE;
            fail("FIONREAD: not the answer's bytes");
        }
        if (n != 1000)
            usleep(1000);
    }
    char line[2000];
    if (!fgets(line, sizeof line, f))
        fail("fgets");
    int twin = dup(fd);
    FILE *g = twin < 0 ? NULL : fdopen(twin, "w");
    if (!g || fclose(g) != 0)
        fail("a second stream");
    if (fcntl(twin, F_GETFD) != -1 || errno != EBADF)
        fail("a stream's descriptor after fclose: still open");
    printf("ok %zu\n", strlen(line));
    fflush(stdout);
    fprintf(f, "bye\n");   /* left in the stream's buffer: exit() flushes it */
    return 0;
}
