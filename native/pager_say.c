/*
 * pager_say.c -- the pager's one line on stderr. Contract: pager.h.
 */
#define _GNU_SOURCE
#include "pager.h"

#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>

/* fatal()'s message, formatted by hand: libc's printf may read state of its own that
 * lies in the heap (a printf specifier registered, a locale set after the heap went
 * on), whose faults only this thread serves. Knows %s, %u, %#x and %#lx. */
static void format(char *out, size_t cap, const char *fmt, va_list ap) {
    char *end = out + cap - 1;
    for (; *fmt && out < end; fmt++) {
        if (*fmt != '%') {
            *out++ = *fmt;
            continue;
        }
        char digits[24];
        const char *text = digits;
        int hex = fmt[1] == '#', is_long = fmt[1 + hex] == 'l';
        fmt += hex + is_long + 1;
        if (*fmt == 's') {
            text = va_arg(ap, const char *);
        } else {
            unsigned long v = is_long ? va_arg(ap, unsigned long) : va_arg(ap, unsigned);
            char *d = digits + sizeof digits;
            *--d = 0;
            do *--d = "0123456789abcdef"[v % (hex ? 16 : 10)]; while ((v /= hex ? 16 : 10));
            if (hex) { *--d = 'x'; *--d = '0'; }
            text = d;
        }
        while (*text && out < end)
            *out++ = *text++;
    }
    *out = 0;
}

void pager_say(const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    format(line, sizeof line, fmt, ap);
    va_end(ap);
    static const char head[] = "splitrack: rack memory: ";
    struct iovec parts[] = {{(void *)head, sizeof head - 1}, {line, strlen(line)}, {"\n", 1}};
    syscall(SYS_writev, 2, parts, 3);   /* (the kernel's, not an interposer's) */
}
