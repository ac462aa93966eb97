/*
 * scrf.c: SCR's Fortran interface (scrf.h) over this library's C API (scr.h).
 *
 * Each routine is the C function of the same name in lower case with one trailing
 * underscore (gfortran's default link names), every argument passed by reference and the
 * error code last; each CHARACTER argument's length follows all the others, in order, as a
 * size_t (gfortran's hidden-length convention). Fortran strings carry no NUL: input names
 * lose their trailing blanks, output names are blank-padded. A name that does not fit
 * SCR_MAX_FILENAME, or an output that does not fit the Fortran variable, is a failure
 * (SCR_FAILURE), never a silent truncation.
 */
#include <stddef.h>
#include <string.h>

#pragma GCC visibility push(default)
#include "scr.h"
#pragma GCC visibility pop

typedef int fint;

/* A Fortran string of `len` characters into a C string of SCR_MAX_FILENAME bytes. */
static int from_fortran(const char *f, size_t len, char *c)
{
    if (!f)
        return -1;
    while (len > 0 && f[len - 1] == ' ')
        len--;
    if (len >= SCR_MAX_FILENAME)
        return -1;
    memcpy(c, f, len);
    c[len] = '\0';
    return 0;
}

/* A C string into a Fortran string of `len` characters, padded with blanks. */
static int to_fortran(const char *c, char *f, size_t len)
{
    size_t n = strlen(c);
    if (!f || n > len)
        return -1;
    memcpy(f, c, n);
    memset(f + n, ' ', len - n);
    return 0;
}

#pragma GCC visibility push(default)
void scr_init_(fint *ierror);
void scr_finalize_(fint *ierror);
void scr_should_exit_(fint *flag, fint *ierror);
void scr_config_(const char *cfg, char *val, fint *ierror, size_t cfg_len, size_t val_len);
void scr_route_file_(const char *name, char *file, fint *ierror, size_t name_len,
                     size_t file_len);
void scr_need_checkpoint_(fint *flag, fint *ierror);
void scr_start_checkpoint_(fint *ierror);
void scr_complete_checkpoint_(fint *valid, fint *ierror);
void scr_start_output_(const char *name, fint *flags, fint *ierror, size_t name_len);
void scr_complete_output_(fint *valid, fint *ierror);
void scr_have_restart_(fint *flag, char *name, fint *ierror, size_t name_len);
void scr_start_restart_(char *name, fint *ierror, size_t name_len);
void scr_complete_restart_(fint *valid, fint *ierror);
void scr_current_(const char *name, fint *ierror, size_t name_len);
void scr_drop_(const char *name, fint *ierror, size_t name_len);
void scr_delete_(const char *name, fint *ierror, size_t name_len);
#pragma GCC visibility pop

void scr_init_(fint *ierror) { *ierror = SCR_Init(); }

void scr_finalize_(fint *ierror) { *ierror = SCR_Finalize(); }

void scr_should_exit_(fint *flag, fint *ierror) { *ierror = SCR_Should_exit(flag); }

void scr_config_(const char *cfg, char *val, fint *ierror, size_t cfg_len, size_t val_len)
{
    char c[SCR_MAX_FILENAME];
    if (from_fortran(cfg, cfg_len, c) != 0) {
        *ierror = SCR_FAILURE;
        return;
    }
    const char *v = SCR_Config(c);
    *ierror = to_fortran(v ? v : "", val, val_len) == 0 ? SCR_SUCCESS : SCR_FAILURE;
}

void scr_route_file_(const char *name, char *file, fint *ierror, size_t name_len,
                     size_t file_len)
{
    char n[SCR_MAX_FILENAME], f[SCR_MAX_FILENAME];
    if (from_fortran(name, name_len, n) != 0) {
        *ierror = SCR_FAILURE;
        return;
    }
    *ierror = SCR_Route_file(n, f);
    if (*ierror == SCR_SUCCESS && to_fortran(f, file, file_len) != 0)
        *ierror = SCR_FAILURE;
}

void scr_need_checkpoint_(fint *flag, fint *ierror) { *ierror = SCR_Need_checkpoint(flag); }

void scr_start_checkpoint_(fint *ierror) { *ierror = SCR_Start_checkpoint(); }

void scr_complete_checkpoint_(fint *valid, fint *ierror)
{
    *ierror = SCR_Complete_checkpoint(*valid);
}

void scr_start_output_(const char *name, fint *flags, fint *ierror, size_t name_len)
{
    char n[SCR_MAX_FILENAME];
    *ierror = from_fortran(name, name_len, n) == 0 ? SCR_Start_output(n, *flags) : SCR_FAILURE;
}

void scr_complete_output_(fint *valid, fint *ierror) { *ierror = SCR_Complete_output(*valid); }

void scr_have_restart_(fint *flag, char *name, fint *ierror, size_t name_len)
{
    char n[SCR_MAX_FILENAME] = "";
    *ierror = SCR_Have_restart(flag, n);
    if (*ierror == SCR_SUCCESS && to_fortran(n, name, name_len) != 0)
        *ierror = SCR_FAILURE;
}

void scr_start_restart_(char *name, fint *ierror, size_t name_len)
{
    char n[SCR_MAX_FILENAME] = "";
    *ierror = SCR_Start_restart(n);
    if (*ierror == SCR_SUCCESS && to_fortran(n, name, name_len) != 0)
        *ierror = SCR_FAILURE;
}

void scr_complete_restart_(fint *valid, fint *ierror) { *ierror = SCR_Complete_restart(*valid); }

/* The routines that take a dataset name. */
static void with_name(int (*fn)(const char *), const char *name, fint *ierror, size_t len)
{
    char n[SCR_MAX_FILENAME];
    *ierror = from_fortran(name, len, n) == 0 ? fn(n) : SCR_FAILURE;
}

void scr_current_(const char *name, fint *ierror, size_t name_len)
{
    with_name(SCR_Current, name, ierror, name_len);
}

void scr_drop_(const char *name, fint *ierror, size_t name_len)
{
    with_name(SCR_Drop, name, ierror, name_len);
}

void scr_delete_(const char *name, fint *ierror, size_t name_len)
{
    with_name(SCR_Delete, name, ierror, name_len);
}
