/* What a signal does to a native program's blocking rack call: what it does on Linux.
 *
 *   signal_probe IP PORT CALL HOW   a SIGALRM handler, installed with sigaction() and
 *                         SA_RESTART if HOW is "restart" (beside a SIGUSR1 handler
 *                         without it, which never runs), with signal() if "signal"
 *                         (BSD's: SA_RESTART), with sysv_signal() if "sysv" (System
 *                         V's, what strict ISO C's signal() is: no SA_RESTART), else
 *                         with sigaction() and no flags; then CALL blocks with an
 *                         alarm due in a second: "accept" on a listener bound to
 *                         IP:PORT (it prints "listening PORT" first), "recv" on a
 *                         connection to IP:PORT (it prints "listening 0" once
 *                         connected; "timedrecv": with SO_RCVTIMEO 3 s, EINTR with
 *                         SA_RESTART too), "send" of a byte on such a connection once it
 *                         takes no more (its peer reads nothing), "bigsend" of 64 MiB
 *                         on one ("bigsend returned part": what went before the
 *                         alarm, as Linux's send returns it), "connect" to IP:PORT
 *                         (a listener whose queue is full: the handshake waits; it
 *                         prints "listening 0" first), "sndtimeo": that connect with
 *                         SO_SNDTIMEO 1 s and no alarm (EINPROGRESS, as Linux's),
 *                         "timedconnect": with SO_SNDTIMEO 3 s and the alarm (EINTR
 *                         with SA_RESTART too: Linux restarts no wait that has a
 *                         time); after any of them ends, a second connect() with no
 *                         SO_SNDTIMEO waits
 *                         for the handshake to end ("connect again returned 0": it
 *                         went on meanwhile). The handler prints
 *                         "alarm". Then it prints
 *                         "CALL EINTR" or what it returned ("accept returned a
 *                         connection", "recv returned N"), and the alarms its handler
 *                         saw.
 *
 * Linux: without SA_RESTART the calls end with EINTR at the alarm; with it they go on
 * waiting (accept for a connection, recv for bytes, send for room). SIGINT, which it does not
 * handle, ends it (status 130 through `splitrack run`). A call still waiting 20 s
 * later ends the probe (status 3), so that a test that fails leaves nothing behind.
 */
#define _GNU_SOURCE   /* sysv_signal */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BIG (64 << 20)
static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
    (void)sig;
    alarms++;
    if (write(1, "alarm\n", 6) != 6)   /* (async-signal-safe: no stdio) */
        alarms += 100;
}

/* Sends until nothing more goes (the peer reads nothing) and the socket stays
 * unwritable a while: a send then blocks with nothing sent. */
static int fill(int fd)
{
    static char chunk[65536];
    struct pollfd room = {.fd = fd, .events = POLLOUT};
    int flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    do {
        while (send(fd, chunk, sizeof chunk, 0) > 0)
            ;
        if (errno != EAGAIN) {
            perror("signal_probe: fill");
            return 0;
        }
    } while (poll(&room, 1, 300) == 1);   /* room again (what was on its way went on) */
    fcntl(fd, F_SETFL, flags);
    return 1;
}

static void *watchdog(void *unused)
{
    (void)unused;
    sleep(20);
    fprintf(stderr, "signal_probe: still waiting after 20 s\n");
    _exit(3);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: signal_probe IP PORT accept|recv|timedrecv|send|bigsend|"
                        "connect|sndtimeo|timedconnect plain|restart|signal|sysv\n");
        return 2;
    }
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &addr.sin_addr);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    if (strcmp(argv[4], "signal") == 0) {
        signal(SIGALRM, on_alarm);
    } else if (strcmp(argv[4], "sysv") == 0) {
        sysv_signal(SIGALRM, on_alarm);
    } else if (strcmp(argv[4], "restart") == 0) {
        sigaction(SIGUSR1, &sa, NULL);   /* no SA_RESTART: not the alarm's, never runs */
        sa.sa_flags = SA_RESTART;
        sigaction(SIGALRM, &sa, NULL);
    } else {
        sigaction(SIGALRM, &sa, NULL);
    }
    sigset_t alarm_only;   /* the alarm comes to this thread, not the watchdog's */
    sigemptyset(&alarm_only);
    sigaddset(&alarm_only, SIGALRM);
    sigaddset(&alarm_only, SIGINT);
    pthread_sigmask(SIG_BLOCK, &alarm_only, NULL);
    pthread_t dog;
    pthread_create(&dog, NULL, watchdog, NULL);
    pthread_sigmask(SIG_UNBLOCK, &alarm_only, NULL);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    long r;
    char buf[16];
    if (strcmp(argv[3], "accept") == 0) {
        socklen_t len = sizeof addr;
        if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 1) != 0 ||
            getsockname(fd, (struct sockaddr *)&addr, &len) != 0) {
            perror("signal_probe: listen");
            return 1;
        }
        printf("listening %d\n", ntohs(addr.sin_port));
        fflush(stdout);
        alarm(1);
        r = accept(fd, NULL, NULL);
    } else if (strcmp(argv[3], "connect") == 0 || strcmp(argv[3], "sndtimeo") == 0 ||
               strcmp(argv[3], "timedconnect") == 0) {
        struct timeval second = {1, 0}, three = {3, 0}, never = {0, 0};
        if (argv[3][0] != 'c')
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, argv[3][0] == 's' ? &second : &three,
                       sizeof second);
        printf("listening 0\n");
        fflush(stdout);
        if (argv[3][0] != 's')
            alarm(1);
        r = connect(fd, (struct sockaddr *)&addr, sizeof addr);
        if (r == 0) {
            printf("%s returned 0 alarms %d\n", argv[3], (int)alarms);
            return 0;
        }
        printf("%s %s alarms %d\n", argv[3], errno == EINTR ? "EINTR" : strerror(errno),
               (int)alarms);
        fflush(stdout);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &never, sizeof never);
        r = connect(fd, (struct sockaddr *)&addr, sizeof addr);   /* the handshake goes on */
        printf("connect again %s\n", r == 0 ? "returned 0" : strerror(errno));
        return 0;
    } else {
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
            perror("signal_probe: connect");
            return 1;
        }
        printf("listening 0\n");
        fflush(stdout);
        if (strcmp(argv[3], "send") == 0) {
            for (int tries = 0;; tries++) {   /* a byte that found room after all: fill on */
                if (!fill(fd))
                    return 1;
                alarm(1);
                r = send(fd, buf, 1, 0);
                if (r != 1 || alarms || tries == 20)
                    break;
                alarm(0);
            }
        } else if (strcmp(argv[3], "bigsend") == 0) {
            static char big[BIG];   /* more than the peer's and the rack's buffers hold */
            alarm(1);
            r = send(fd, big, sizeof big, 0);
            if (r > 0 && r < BIG) {
                printf("bigsend returned part alarms %d\n", (int)alarms);
                return 0;
            }
        } else {
            if (strcmp(argv[3], "timedrecv") == 0) {
                struct timeval three = {3, 0};
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &three, sizeof three);
            }
            alarm(1);
            r = recv(fd, buf, sizeof buf, 0);
        }
    }
    if (r < 0)
        printf("%s %s alarms %d\n", argv[3], errno == EINTR ? "EINTR" : strerror(errno),
               (int)alarms);
    else if (strcmp(argv[3], "accept") == 0)
        printf("accept returned a connection alarms %d\n", (int)alarms);
    else
        printf("%s returned %ld alarms %d\n", argv[3], r, (int)alarms);
    return 0;
}
