/*
 * text.h: small string helpers shared by the compatibility libraries' configuration readers
 * (scr/, fti/, veloc/). Header-only, so each library stays one directory of sources.
 */
#ifndef CAIRN_COMPAT_TEXT_H
#define CAIRN_COMPAT_TEXT_H

#include <ctype.h>
#include <string.h>

/* `s` without leading and trailing white space: the end is cut in place. */
static inline char *compat_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

#endif
