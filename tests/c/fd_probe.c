/* The descriptors a native program gets on the rack are numbered as Linux numbers them
 * (the rack's own live out of the way: native/preload_fd.c, rack_own): an epoll, a TCP
 * socket (the first, which starts the interposer's interpreter), a pipe, a UDP socket,
 * a dup of the TCP socket, then, once the pipe's read end is closed, one more TCP
 * socket, which takes its number. It prints each number: on Linux, with 0-2 open,
 * "epoll 3 tcp 4 pipe 5 6 udp 7 dup 8 again 5".
 */
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

int main(void)
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
    return 0;
}
