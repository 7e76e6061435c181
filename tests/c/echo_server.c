#define _GNU_SOURCE
/* A TCP echo server, as a C program: the rack's native interposer under test.
 *
 *   echo_server IP PORT MODE CONNS [READ]
 *
 * MODE: "block" (accept, then read/write until EOF, one connection at a time),
 * "waitall" (the same, each read a recv(MSG_WAITALL) of READ bytes), "poll" or
 * "epoll" (non-blocking, every connection at once in one loop).
 * Prints "listening PORT" once it listens (PORT 0: the port it got), serves
 * CONNS connections, then exits 0. READ: at most this many bytes a read (default and
 * most: 65536). Any failed call: its errno, exit 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 64

static void fail(const char *what)
{
    fprintf(stderr, "echo_server: %s: %s\n", what, strerror(errno));
    exit(1);
}

static size_t piece = 65536;   /* READ */
static int read_flags;         /* MSG_WAITALL in "waitall" */

/* Echo what is there; 1 while the connection is open. */
static int echo(int fd)
{
    char buf[65536];
    ssize_t n = recv(fd, buf, piece, read_flags);
    if (n == 0)
        return 0;
    if (n < 0)
        return errno == EAGAIN ? 1 : (fail("read"), 0);
    if (read_flags & MSG_WAITALL && (size_t)n != piece) {   /* (the clients send whole ones) */
        fprintf(stderr, "echo_server: MSG_WAITALL read %zd of %zu\n", n, piece);
        exit(1);
    }
    for (ssize_t at = 0; at < n;) {   /* (a non-blocking write may take part) */
        ssize_t k = write(fd, buf + at, n - at);
        if (k < 0 && errno != EAGAIN)
            fail("write");
        if (k < 0) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            poll(&p, 1, -1);
            continue;
        }
        at += k;
    }
    return 1;
}

static void nonblocking(int fd)
{
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
        fail("fcntl");
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: echo_server IP PORT block|waitall|poll|epoll CONNS [READ]\n");
        return 2;
    }
    if (argc == 6 && (piece = strtoul(argv[5], NULL, 10)) - 1 >= 65536) {
        fprintf(stderr, "echo_server: READ is 1..65536\n");
        return 2;
    }
    const char *mode = argv[3];
    int conns = atoi(argv[4]), one = 1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &addr.sin_addr);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0)
        fail("socket");
    if (setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
        fail("setsockopt");
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0)
        fail("bind");
    if (listen(lfd, 16) < 0)
        fail("listen");
    socklen_t len = sizeof addr;
    if (getsockname(lfd, (struct sockaddr *)&addr, &len) < 0)
        fail("getsockname");
    printf("listening %d\n", ntohs(addr.sin_port));
    fflush(stdout);

    if (strcmp(mode, "waitall") == 0) {
        mode = "block";
        read_flags = MSG_WAITALL;
    }
    if (strcmp(mode, "block") == 0) {
        for (int served = 0; served < conns; served++) {
            int fd = accept(lfd, NULL, NULL);
            if (fd < 0)
                fail("accept");
            while (echo(fd))
                ;
            close(fd);
        }
    } else if (strcmp(mode, "poll") == 0) {
        struct pollfd fds[MAX_CONNS + 1] = {{.fd = lfd, .events = POLLIN}};
        int open = 0, served = 0;
        nonblocking(lfd);
        while (served < conns || open) {
            if (poll(fds, open + 1, -1) < 0)
                fail("poll");
            for (int i = 1; i <= open; i++)
                if (fds[i].revents && !echo(fds[i].fd)) {
                    close(fds[i].fd);
                    fds[i--] = fds[open--];
                }
            if (fds[0].revents & POLLIN && served < conns) {
                int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
                if (fd < 0 && errno != EAGAIN)
                    fail("accept4");
                if (fd >= 0) {
                    fds[++open] = (struct pollfd){.fd = fd, .events = POLLIN};
                    served++;
                }
            }
        }
    } else if (strcmp(mode, "epoll") == 0) {
        int ep = epoll_create1(0), open = 0, served = 0;
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd}, got[16];
        nonblocking(lfd);
        if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
            fail("epoll");
        while (served < conns || open) {
            int n = epoll_wait(ep, got, 16, -1);
            if (n < 0)
                fail("epoll_wait");
            for (int i = 0; i < n; i++) {
                int fd = got[i].data.fd;
                if (fd != lfd) {
                    if (!echo(fd)) {
                        epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
                        close(fd);
                        open--;
                    }
                    continue;
                }
                int c = accept(lfd, NULL, NULL);
                if (c < 0 && errno != EAGAIN)
                    fail("accept");
                if (c >= 0) {
                    nonblocking(c);
                    ev = (struct epoll_event){.events = EPOLLIN, .data.fd = c};
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) < 0)
                        fail("epoll_ctl");
                    open++;
                    served++;
                }
            }
        }
    } else {
        fprintf(stderr, "echo_server: no mode %s (block, poll, epoll)\n", mode);
        return 2;
    }
    close(lfd);
    return 0;
}
