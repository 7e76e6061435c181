/* What a fork()ed child of a rack program may do with rack sockets (native programs).
 *
 *   fork_probe IP PORT    connect to an echo server, fork; the child sends "x" on
 *                         its copy of the connection, tries a new socket, and prints
 *                         what each gave (errno names); the parent, after the child
 *                         ended, sends "ping" and reads "xping" back: "parent ok"
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char c = 'x';
        ssize_t n = send(fd, &c, 1, MSG_NOSIGNAL);
        printf("child send %s\n", n < 0 ? name(errno) : "sent");
        int s = socket(AF_INET, SOCK_STREAM, 0);
        printf("child socket %s\n", s < 0 ? name(errno) : "made");
        close(fd);
        fflush(stdout);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    char in[6] = {0};
    if (send(fd, "ping", 4, 0) != 4 || recv(fd, in, 5, MSG_WAITALL) != 5 || strcmp(in, "xping")) {
        perror("fork_probe: parent echo");
        return 1;
    }
    printf("parent ok\n");
    return 0;
}
