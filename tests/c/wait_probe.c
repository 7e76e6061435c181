#define _GNU_SOURCE
/* The waits of a native program on the rack (native/preload_wait.c), as a C program.
 *
 *   wait_probe IP PORT
 *
 * Listens (prints "listening PORT"), then, on the connections a client makes:
 *   1. select() on the first, which stays quiet: 0 after 200 ms, the timeval left 0,
 *      and the program has as many threads after it as before (no inbox thread:
 *      the wait itself read the inbox);
 *   2. poll() on it beside a descriptor that is always ready (a pipe's write end),
 *      until the client's byte makes it readable: the rack's pushes are read while the
 *      program's other descriptor keeps every wait short;
 *   3. a second connection: a thread blocks in read() on the first while the main
 *      thread waits in epoll_wait() on the second; each gets its byte;
 *   4. select() on a closed descriptor: EBADF;
 *   5. a signal handler siglongjmp()s out of a poll() on the second connection (as
 *      some programs leave a wait); the next poll() still gets the client's byte.
 * Each step prints a line ("select 0 left 0 threads +0", "busy N", "threads ok",
 * "ebadf ok", "jumped", "after the jump ok");
 * any failed call: its errno, exit 1.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static void fail(const char *what)
{
    fprintf(stderr, "wait_probe: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void expect_byte(int fd, char want, const char *what)
{
    char got;
    if (read(fd, &got, 1) != 1)
        fail(what);
    if (got != want) {
        fprintf(stderr, "wait_probe: %s: got %c, not %c\n", what, got, want);
        exit(1);
    }
}

static int threads(void)   /* this process's, from /proc/self/task */
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d)
        fail("opendir");
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static sigjmp_buf out_of_the_wait;

static void jump(int sig)
{
    (void)sig;
    siglongjmp(out_of_the_wait, 1);
}

static void *blocked_reader(void *arg)
{
    expect_byte(*(int *)arg, 'b', "the thread's read");
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: wait_probe IP PORT\n");
        return 2;
    }
    int lsock = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    socklen_t len = sizeof addr;
    if (lsock < 0 || inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1)
        fail("socket");
    if (bind(lsock, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(lsock, 4) < 0
        || getsockname(lsock, (struct sockaddr *)&addr, &len) < 0)
        fail("bind/listen");
    printf("listening %d\n", ntohs(addr.sin_port));
    fflush(stdout);

    int one = accept(lsock, NULL, NULL);
    if (one < 0)
        fail("accept");
    fd_set r;   /* 1. a quiet socket: select times out, and says no time is left */
    FD_ZERO(&r);
    FD_SET(one, &r);
    struct timeval tv = {0, 200000};
    int before = threads();
    int got = select(one + 1, &r, NULL, NULL, &tv);
    if (got < 0)
        fail("select");
    printf("select %d left %ld threads %+d\n", got, tv.tv_sec * 1000000L + tv.tv_usec,
           threads() - before);
    fflush(stdout);

    int pipefd[2];   /* 2. beside a descriptor that is always ready */
    if (pipe(pipefd) < 0)
        fail("pipe");
    long rounds = 0;
    for (;;) {
        struct pollfd p[2] = {{.fd = pipefd[1], .events = POLLOUT},
                              {.fd = one, .events = POLLIN}};
        if (poll(p, 2, 10000) < 0)
            fail("poll");
        rounds++;
        if (p[1].revents & POLLIN)
            break;
        if (!(p[0].revents & POLLOUT)) {
            fprintf(stderr, "wait_probe: the pipe is not writable\n");
            return 1;
        }
    }
    expect_byte(one, 'a', "read after poll");
    printf("busy %ld\n", rounds);
    fflush(stdout);

    int two = accept(lsock, NULL, NULL);   /* 3. a blocked reader and an epoll waiter */
    if (two < 0)
        fail("accept");
    pthread_t reader;
    if (pthread_create(&reader, NULL, blocked_reader, &one) != 0)
        fail("pthread_create");
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = two}, out;
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, two, &ev) < 0)
        fail("epoll");
    got = epoll_wait(ep, &out, 1, 10000);
    if (got != 1 || out.data.fd != two) {
        fprintf(stderr, "wait_probe: epoll_wait: %d\n", got);
        return 1;
    }
    expect_byte(two, 'c', "read after epoll_wait");
    pthread_join(reader, NULL);
    printf("threads ok\n");
    fflush(stdout);

    int gone = dup(two);   /* 4. a closed descriptor */
    close(gone);
    FD_ZERO(&r);
    FD_SET(gone, &r);
    tv = (struct timeval){1, 0};
    if (select(gone + 1, &r, NULL, NULL, &tv) != -1 || errno != EBADF)
        fail("select on a closed descriptor");
    printf("ebadf ok\n");
    fflush(stdout);

    struct sigaction sa = {.sa_handler = jump};   /* 5. out of a wait by siglongjmp */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) < 0)
        fail("sigaction");
    if (!sigsetjmp(out_of_the_wait, 1)) {
        struct itimerval at = {.it_value = {0, 100000}};
        setitimer(ITIMER_REAL, &at, NULL);
        struct pollfd p = {.fd = two, .events = POLLIN};
        poll(&p, 1, 10000);   /* (the client is quiet: only the signal ends it) */
        fprintf(stderr, "wait_probe: the poll ended without the signal\n");
        return 1;
    }
    printf("jumped\n");
    fflush(stdout);
    struct pollfd p = {.fd = two, .events = POLLIN};
    if (poll(&p, 1, 10000) != 1)
        fail("the poll after the jump (its inbox never read?)");
    expect_byte(two, 'd', "read after the jump");
    printf("after the jump ok\n");
    close(ep);
    close(one);
    close(two);
    close(lsock);
    return 0;
}
