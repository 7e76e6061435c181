/* The descriptors a native program gets on the rack are numbered as Linux numbers them
 * (the rack's own live out of the way: native/preload_fd.c, rack_own): an epoll, a TCP
 * socket (the first, which starts the interposer's interpreter), a pipe, a UDP socket,
 * a dup of the TCP socket, then, once the pipe's read end is closed, one more TCP
 * socket, which takes its number. It prints each number: on Linux, with 0-2 open,
 * "epoll 3 tcp 4 pipe 5 6 udp 7 dup 8 again 5". Then, given an address (fd_probe IP),
 * it listens there and fork()s; the child accepts on the listener it inherited (on
 * the rack, through its parent) and prints the connection's number, and the parent,
 * which connects, its own: "listener 9 child's accept 10 client 10".
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int ep = epoll_create1(0), tcp = socket(AF_INET, SOCK_STREAM, 0), p[2];
    if (pipe(p) != 0) {
        perror("fd_probe: pipe");
        return 1;
    }
    int udp = socket(AF_INET, SOCK_DGRAM, 0), copy = dup(tcp);
    close(p[0]);
    int again = socket(AF_INET, SOCK_STREAM, 0);
    printf("epoll %d tcp %d pipe %d %d udp %d dup %d again %d\n", ep, tcp, p[0], p[1], udp,
           copy, again);
    if (argc < 2)
        return 0;
    struct sockaddr_in at = {.sin_family = AF_INET};
    socklen_t len = sizeof at;
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    if (inet_pton(AF_INET, argv[1], &at.sin_addr) != 1 ||
        bind(listener, (struct sockaddr *)&at, sizeof at) != 0 || listen(listener, 1) != 0 ||
        getsockname(listener, (struct sockaddr *)&at, &len) != 0) {
        perror("fd_probe: listen");
        return 1;
    }
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        printf("listener %d child's accept %d", listener, accept(listener, NULL, NULL));
        fflush(stdout);
        _exit(0);
    }
    int client = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(client, (struct sockaddr *)&at, sizeof at) != 0)
        perror("fd_probe: connect");
    waitpid(child, NULL, 0);
    printf(" client %d\n", client);
    return 0;
}
