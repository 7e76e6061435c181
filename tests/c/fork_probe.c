/* What a fork()ed child of a rack program may do with rack sockets (native programs).
 *
 *   fork_probe IP PORT    connect to an echo server, fork; the child sends "x" on
 *                         its copy of the connection, polls it until the echo is
 *                         there and asks ioctl FIONREAD (through its parent, as
 *                         every call on it: 1), then echoes "new" through a
 *                         connection of its own to the same server (poll()ing it, as
 *                         its parent did before the fork), and prints what each
 *                         gave (errno names); the parent, after the child
 *                         ended, sends "ping", polls, and reads "xping" back:
 *                         "parent ok"
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *name(int e)
{
    return e == EBADF ? "EBADF" : e == EOPNOTSUPP ? "EOPNOTSUPP" : strerror(e);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fork_probe IP PORT\n");
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &addr.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        perror("fork_probe: connect");
        return 1;
    }
    struct pollfd ready = {.fd = fd, .events = POLLOUT};
    if (poll(&ready, 1, 5000) != 1) {   /* (the runtime is polled from here on) */
        perror("fork_probe: poll");
        return 1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char c = 'x';
        ssize_t n = send(fd, &c, 1, MSG_NOSIGNAL);
        printf("child send %s\n", n < 0 ? name(errno) : "sent");
        struct pollfd echoed = {.fd = fd, .events = POLLIN};
        int waiting = -1;
        if (poll(&echoed, 1, 5000) != 1 || ioctl(fd, FIONREAD, &waiting) != 0)
            printf("child fionread %s\n", name(errno));
        else
            printf("child fionread %d\n", waiting);
        char back[4] = {0};
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct pollfd echo = {.fd = s, .events = POLLIN};
        if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof addr) < 0
            || send(s, "new", 3, 0) != 3)
            printf("child socket %s\n", name(errno));
        else if (poll(&echo, 1, 5000) != 1)   /* its own socket's readiness, too */
            printf("child poll %s\n", errno ? name(errno) : "timed out");
        else if (recv(s, back, 3, MSG_WAITALL) != 3)
            printf("child recv %s\n", name(errno));
        else
            printf("child socket echoed %s\n", back);
        close(s);
        close(fd);
        fflush(stdout);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    char in[6] = {0};
    struct pollfd back = {.fd = fd, .events = POLLIN};   /* (threaded since the fork) */
    if (send(fd, "ping", 4, 0) != 4 || poll(&back, 1, 5000) != 1
        || recv(fd, in, 5, MSG_WAITALL) != 5 || strcmp(in, "xping")) {
        perror("fork_probe: parent echo");
        return 1;
    }
    printf("parent ok\n");
    return 0;
}
