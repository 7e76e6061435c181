/* A forking TCP echo server, as a C program: each connection is served by a child.
 *
 *   fork_server IP PORT CONNS [PROGRAM ARGS...]
 *
 * Prints "listening PORT"; for each of CONNS connections: accept, fork; the child
 * closes the listener, echoes until EOF and exits 0 -- or, given a PROGRAM, as inetd
 * does: dup2()s the connection onto its stdin and stdout and exec()s PROGRAM, which
 * knows nothing of sockets; the parent closes its copy of the connection at once
 * (the child's keeps it open). Exits 0 once every child exited 0.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void fail(const char *what)
{
    fprintf(stderr, "fork_server: %s: %s\n", what, strerror(errno));
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: fork_server IP PORT CONNS [PROGRAM ARGS...]\n");
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &addr.sin_addr);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), conns = atoi(argv[3]), failed = 0;
    socklen_t len = sizeof addr;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(lfd, 16) < 0
        || getsockname(lfd, (struct sockaddr *)&addr, &len) < 0)
        fail("listen");
    printf("listening %d\n", ntohs(addr.sin_port));
    fflush(stdout);
    for (int i = 0; i < conns; i++) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            fail("accept");
        pid_t pid = fork();
        if (pid < 0)
            fail("fork");
        if (pid == 0) {
            close(lfd);
            if (argc > 4) {   /* inetd's way */
                if (dup2(fd, 0) < 0 || dup2(fd, 1) < 0)
                    fail("dup2");
                close(fd);
                execvp(argv[4], argv + 4);
                fail("exec");
            }
            char buf[16384];
            ssize_t n;
            while ((n = read(fd, buf, sizeof buf)) > 0)
                for (ssize_t at = 0; at < n;) {
                    ssize_t k = write(fd, buf + at, (size_t)(n - at));
                    if (k < 0)
                        fail("child write");
                    at += k;
                }
            if (n < 0)
                fail("child read");
            close(fd);
            exit(0);
        }
        close(fd);
    }
    for (int status; wait(&status) > 0;)
        failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    close(lfd);
    return failed ? 1 : 0;
}
