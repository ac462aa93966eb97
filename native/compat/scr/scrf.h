! scrf.h: SCR's Fortran interface, implemented by Cairn (native/compat/scr/scrf.c).
! Include it in Fortran code (INCLUDE 'scrf.h') and call SCR's routines with an integer
! error argument last, e.g. CALL SCR_ROUTE_FILE(name, file, ierr); link with -lscr.
! Strings are Fortran strings: trailing blanks are ignored on input, and output is
! padded with blanks. docs/migrate-scr.md describes the routines.
!
! return codes
      INTEGER SCR_SUCCESS
      PARAMETER (SCR_SUCCESS=0)
!
! the longest file or dataset name
      INTEGER SCR_MAX_FILENAME
      PARAMETER (SCR_MAX_FILENAME=1024)
!
! flags of SCR_START_OUTPUT
      INTEGER SCR_FLAG_NONE
      PARAMETER (SCR_FLAG_NONE=0)
      INTEGER SCR_FLAG_CHECKPOINT
      PARAMETER (SCR_FLAG_CHECKPOINT=1)
      INTEGER SCR_FLAG_OUTPUT
      PARAMETER (SCR_FLAG_OUTPUT=2)
