! cairn.f90: the Fortran interface of Cairn, a multi-level checkpoint/restart library.
!
! `use cairn` gives a Fortran program the C interface of libcairn (cairn.h, cairn_mpi.h) with
! Fortran types: communicators are the INTEGER handles of `use mpi` (pass comm%MPI_VAL with
! `use mpi_f08`), names are CHARACTER strings (trailing blanks are removed), versions are
! INTEGER(int64), flags are LOGICAL, and cairn_protect is generic over the element type of
! the array it protects. The module needs no MPI module of its own: the communicator crosses
! to C as an integer and libcairn converts it (cairn_init_f, MPI_Comm_f2c).
!
! The file is divided into:
!   1. the constants: error codes, checkpoint states and element types (as in cairn.h);
!   2. the C declarations (bind(c), private), one per entry point of libcairn;
!   3. the public procedures: starting and finishing; protecting memory; checkpoint and
!      restart; the checkpoint and exit policy; error messages;
!   4. private helpers: C strings and the delivery of error codes.
!
! Errors. Every procedure takes an optional INTEGER, INTENT(OUT) argument ierr, always last.
! With ierr the code (CAIRN_OK or a negative CAIRN_ERR_*) is stored there and nothing is
! printed. Without it a failure prints one line, "cairn: <procedure> failed: <reason>:
! <message>", to error_unit, and the program goes on. The module never stops the program,
! as libcairn never aborts it: what to do about an error is the caller's decision.
! cairn_last_error() returns the message of the last failure.
!
! Protected memory. cairn_protect remembers the address of the array, so the array must stay
! where it is until it is unprotected or Cairn is finalised: give it the TARGET attribute
! (or make it a POINTER or ALLOCATABLE, TARGET array that is not reallocated), and protect
! whole contiguous arrays or contiguous sections. A non-contiguous section is refused with
! CAIRN_ERR_INVALID rather than protected through a temporary copy.
!
! Standard: Fortran 2008 with assumed-rank dummy arguments (TS 29113, part of Fortran 2018)
! and IS_CONTIGUOUS (Fortran 2018); gfortran 9 and every current compiler have both. Assumed
! rank is what lets one cairn_protect take scalars and arrays of every rank.
module cairn
  use, intrinsic :: iso_c_binding, only: c_char, c_int, c_int64_t, c_intptr_t, c_size_t, &
    c_ptr, c_null_ptr, c_null_char, c_loc, c_associated, c_f_pointer
  use, intrinsic :: iso_fortran_env, only: int8, int16, int32, int64, real32, real64, &
    error_unit
  implicit none
  private

  ! ---- 1. Constants --------------------------------------------------------------------------

  !> Error codes, as in cairn.h.
  integer, parameter, public :: CAIRN_OK = 0
  integer, parameter, public :: CAIRN_ERR_CONFIG = -1    ! unknown key or bad value
  integer, parameter, public :: CAIRN_ERR_INVALID = -2   ! invalid argument
  integer, parameter, public :: CAIRN_ERR_STATE = -3     ! not initialised, initialised twice
  integer, parameter, public :: CAIRN_ERR_IO = -4        ! storage failed
  integer, parameter, public :: CAIRN_ERR_CORRUPT = -5   ! stored data is damaged
  integer, parameter, public :: CAIRN_ERR_MISMATCH = -6  ! checkpoint does not fit the regions
  integer, parameter, public :: CAIRN_ERR_NOT_FOUND = -7 ! no such checkpoint
  integer, parameter, public :: CAIRN_ERR_COMM = -8      ! a collective operation failed
  integer, parameter, public :: CAIRN_ERR_PEER = -9      ! failed on another rank
  integer, parameter, public :: CAIRN_ERR_PANIC = -10    ! internal error
  integer, parameter, public :: CAIRN_ERR_IN_USE = -11   ! another job holds the name (job lock)

  !> Lifecycle states of a checkpoint, from cairn_test.
  integer, parameter, public :: CAIRN_STATE_NONE = 0
  integer, parameter, public :: CAIRN_STATE_CAPTURED = 1
  integer, parameter, public :: CAIRN_STATE_PROTECTED = 2
  integer, parameter, public :: CAIRN_STATE_DURABLE = 3

  !> Element types of a region, for cairn_protect_ptr (cairn_protect picks them itself).
  integer, parameter, public :: CAIRN_BYTE = 0
  integer, parameter, public :: CAIRN_INT32 = 1
  integer, parameter, public :: CAIRN_INT64 = 2
  integer, parameter, public :: CAIRN_FLOAT = 3
  integer, parameter, public :: CAIRN_DOUBLE = 4
  integer, parameter, public :: CAIRN_INT8 = 5
  integer, parameter, public :: CAIRN_INT16 = 6
  integer, parameter, public :: CAIRN_UINT32 = 7
  integer, parameter, public :: CAIRN_UINT64 = 8

  public :: cairn_init, cairn_init_solo, cairn_config_set, cairn_finalize
  public :: cairn_protect, cairn_protect_ptr, cairn_unprotect
  public :: cairn_checkpoint, cairn_restart_test, cairn_restart, cairn_restart_version
  public :: cairn_resume, cairn_test, cairn_wait
  public :: cairn_need_checkpoint, cairn_checkpoint_if_due, cairn_should_exit
  public :: cairn_last_error, cairn_strerror

  !> Protect a scalar or an array of any rank under an id: cairn_protect(id, a [, ierr]).
  !> Element types: integer(int8, int16, int32, int64), real(real32, real64),
  !> complex(real32, real64) (stored as pairs of reals), default logical and character
  !> (stored as bytes). Protecting an id again replaces its region. Not collective.
  interface cairn_protect
    module procedure protect_int8, protect_int16, protect_int32, protect_int64
    module procedure protect_real32, protect_real64, protect_complex32, protect_complex64
    module procedure protect_logical, protect_character
  end interface

  ! ---- 2. The C declarations -----------------------------------------------------------------

  interface
    integer(c_int) function c_init_f(comm, config) bind(c, name='cairn_init_f')
      import :: c_int, c_char
      integer(c_int), value :: comm
      character(kind=c_char), intent(in), optional :: config(*)
    end function

    integer(c_int) function c_init_solo(config) bind(c, name='cairn_init_solo')
      import :: c_int, c_char
      character(kind=c_char), intent(in), optional :: config(*)
    end function

    integer(c_int) function c_config_set(key, value) bind(c, name='cairn_config_set')
      import :: c_int, c_char
      character(kind=c_char), intent(in) :: key(*), value(*)
    end function

    integer(c_int) function c_finalize() bind(c, name='cairn_finalize')
      import :: c_int
    end function

    integer(c_int) function c_protect(id, ptr, count, dtype) bind(c, name='cairn_protect')
      import :: c_int, c_ptr, c_intptr_t
      integer(c_int), value :: id
      type(c_ptr), value :: ptr
      integer(c_intptr_t), value :: count
      integer(c_int), value :: dtype
    end function

    integer(c_int) function c_unprotect(id) bind(c, name='cairn_unprotect')
      import :: c_int
      integer(c_int), value :: id
    end function

    integer(c_int) function c_checkpoint(name, version) bind(c, name='cairn_checkpoint')
      import :: c_int, c_char, c_int64_t
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), value :: version
    end function

    integer(c_int) function c_restart_test(name, version) bind(c, name='cairn_restart_test')
      import :: c_int, c_char, c_int64_t
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), intent(out) :: version
    end function

    integer(c_int) function c_restart(name, version) bind(c, name='cairn_restart')
      import :: c_int, c_char, c_int64_t
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), value :: version
    end function

    integer(c_int) function c_restart_version(version) bind(c, name='cairn_restart_version')
      import :: c_int, c_int64_t
      integer(c_int64_t), intent(out) :: version
    end function

    integer(c_int) function c_resume(name, version) bind(c, name='cairn_resume')
      import :: c_int, c_char, c_int64_t
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), intent(out) :: version
    end function

    integer(c_int) function c_test(name, version, state) bind(c, name='cairn_test')
      import :: c_int, c_char, c_int64_t
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), value :: version
      integer(c_int), intent(out) :: state
    end function

    integer(c_int) function c_wait(name, version) bind(c, name='cairn_wait')
      import :: c_int, c_char, c_int64_t
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), value :: version
    end function

    integer(c_int) function c_need_checkpoint(flag) bind(c, name='cairn_need_checkpoint')
      import :: c_int
      integer(c_int), intent(out) :: flag
    end function

    integer(c_int) function c_checkpoint_if_due(name, version) &
        bind(c, name='cairn_checkpoint_if_due')
      import :: c_int, c_char, c_int64_t
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), value :: version
    end function

    integer(c_int) function c_should_exit(flag) bind(c, name='cairn_should_exit')
      import :: c_int
      integer(c_int), intent(out) :: flag
    end function

    type(c_ptr) function c_strerror(code) bind(c, name='cairn_strerror')
      import :: c_ptr, c_int
      integer(c_int), value :: code
    end function

    type(c_ptr) function c_last_error() bind(c, name='cairn_last_error')
      import :: c_ptr
    end function

    integer(c_size_t) function c_strlen(s) bind(c, name='strlen')
      import :: c_size_t, c_ptr
      type(c_ptr), value :: s
    end function
  end interface

  ! A failure found by the module itself (a non-contiguous array) has no message in libcairn;
  ! it is kept here until the next failure libcairn reports. Not per thread, unlike libcairn's.
  character(len=:), allocatable :: own_error
  logical :: own_error_is_last = .false.

contains

  ! ---- 3. Starting and finishing -------------------------------------------------------------

  !> Start Cairn over the ranks of communicator comm (an INTEGER handle of `use mpi`;
  !> comm%MPI_VAL of `use mpi_f08`). Collective over comm. config: a TOML configuration file;
  !> without it (or if it is blank) $CAIRN_CONFIG or the defaults are used. Call after
  !> MPI_Init and call cairn_finalize before MPI_Finalize. Fails on every rank if it fails on
  !> any.
  subroutine cairn_init(comm, config, ierr)
    integer, intent(in) :: comm
    character(len=*), intent(in), optional :: config
    integer, intent(out), optional :: ierr
    integer(c_int) :: rc

    if (given(config)) then
      rc = c_init_f(int(comm, c_int), c_string(config))
    else
      rc = c_init_f(int(comm, c_int))
    end if
    call deliver(rc, 'cairn_init', ierr)
  end subroutine

  !> Start Cairn in a single process, without MPI. config as for cairn_init.
  subroutine cairn_init_solo(config, ierr)
    character(len=*), intent(in), optional :: config
    integer, intent(out), optional :: ierr
    integer(c_int) :: rc

    if (given(config)) then
      rc = c_init_solo(c_string(config))
    else
      rc = c_init_solo()
    end if
    call deliver(rc, 'cairn_init_solo', ierr)
  end subroutine

  !> Override one configuration key before cairn_init, e.g. ('cache.keep', '3'). Overrides
  !> beat the file and CAIRN_* variables. The key is checked at once.
  subroutine cairn_config_set(key, value, ierr)
    character(len=*), intent(in) :: key, value
    integer, intent(out), optional :: ierr

    call deliver(c_config_set(c_string(key), c_string(value)), 'cairn_config_set', ierr)
  end subroutine

  !> Finish: make the newest checkpoint of each name durable (unless [checkpoint] finalize =
  !> false), wait for background work and forget the protected regions. Collective.
  subroutine cairn_finalize(ierr)
    integer, intent(out), optional :: ierr

    call deliver(c_finalize(), 'cairn_finalize', ierr)
  end subroutine

  ! ---- 3. Protecting memory ------------------------------------------------------------------
  !
  ! One specific procedure per element type (generic resolution needs one each); all hand the
  ! array to protect_any with its type code and the number of such values in one element.

  subroutine protect_int8(id, a, ierr)
    integer, intent(in) :: id
    integer(int8), intent(inout), target :: a(..)
    integer, intent(out), optional :: ierr
    call protect_any(id, a, CAIRN_INT8, 1, ierr)
  end subroutine

  subroutine protect_int16(id, a, ierr)
    integer, intent(in) :: id
    integer(int16), intent(inout), target :: a(..)
    integer, intent(out), optional :: ierr
    call protect_any(id, a, CAIRN_INT16, 1, ierr)
  end subroutine

  subroutine protect_int32(id, a, ierr)
    integer, intent(in) :: id
    integer(int32), intent(inout), target :: a(..)
    integer, intent(out), optional :: ierr
    call protect_any(id, a, CAIRN_INT32, 1, ierr)
  end subroutine

  subroutine protect_int64(id, a, ierr)
    integer, intent(in) :: id
    integer(int64), intent(inout), target :: a(..)
    integer, intent(out), optional :: ierr
    call protect_any(id, a, CAIRN_INT64, 1, ierr)
  end subroutine

  subroutine protect_real32(id, a, ierr)
    integer, intent(in) :: id
    real(real32), intent(inout), target :: a(..)
    integer, intent(out), optional :: ierr
    call protect_any(id, a, CAIRN_FLOAT, 1, ierr)
  end subroutine

  subroutine protect_real64(id, a, ierr)
    integer, intent(in) :: id
    real(real64), intent(inout), target :: a(..)
    integer, intent(out), optional :: ierr
    call protect_any(id, a, CAIRN_DOUBLE, 1, ierr)
  end subroutine

  ! A complex number is its real and imaginary parts, next to each other: complex(real32) and
  ! complex(real64) are C's float _Complex and double _Complex (c_float_complex,
  ! c_double_complex), which C lays out as two floats or doubles.
  subroutine protect_complex32(id, a, ierr)
    integer, intent(in) :: id
    complex(real32), intent(inout), target :: a(..)
    integer, intent(out), optional :: ierr
    call protect_any(id, a, CAIRN_FLOAT, 2, ierr)
  end subroutine

  subroutine protect_complex64(id, a, ierr)
    integer, intent(in) :: id
    complex(real64), intent(inout), target :: a(..)
    integer, intent(out), optional :: ierr
    call protect_any(id, a, CAIRN_DOUBLE, 2, ierr)
  end subroutine

  ! LOGICAL and CHARACTER have no C counterpart in cairn.h; their bytes are stored as they are.
  subroutine protect_logical(id, a, ierr)
    integer, intent(in) :: id
    logical, intent(inout), target :: a(..)
    integer, intent(out), optional :: ierr
    call protect_any(id, a, CAIRN_BYTE, storage_size(.true.) / 8, ierr)
  end subroutine

  subroutine protect_character(id, a, ierr)
    integer, intent(in) :: id
    character(len=*), intent(inout), target :: a(..)
    integer, intent(out), optional :: ierr
    call protect_any(id, a, CAIRN_BYTE, len(a), ierr)
  end subroutine

  ! Protect the memory of `a` as size(a) * per_element values of type code dtype.
  subroutine protect_any(id, a, dtype, per_element, ierr)
    integer, intent(in) :: id
    type(*), intent(inout), target :: a(..)
    integer, intent(in) :: dtype, per_element
    integer, intent(out), optional :: ierr
    character(len=32) :: text

    if (.not. is_contiguous(a)) then
      write (text, '(i0)') id
      call fail(CAIRN_ERR_INVALID, 'cairn_protect(id ' // trim(text) // '): the array is ' // &
        'not contiguous; protect a contiguous array or section (Cairn keeps its address)', &
        'cairn_protect', ierr)
      return
    end if
    if (size(a) == 0) then
      call cairn_protect_ptr(id, c_null_ptr, 0_c_intptr_t, dtype, ierr)
    else
      call cairn_protect_ptr(id, c_loc(a), size(a, kind=c_intptr_t) * per_element, dtype, ierr)
    end if
  end subroutine

  !> Protect count elements of type code dtype (CAIRN_BYTE ... CAIRN_UINT64) at address ptr,
  !> as cairn_protect in C does: for memory cairn_protect cannot describe, such as arrays of
  !> derived types (as bytes: c_loc(x), storage_size(x) / 8 * size(x), CAIRN_BYTE).
  subroutine cairn_protect_ptr(id, ptr, count, dtype, ierr)
    integer, intent(in) :: id
    type(c_ptr), intent(in) :: ptr
    integer(c_intptr_t), intent(in) :: count
    integer, intent(in) :: dtype
    integer, intent(out), optional :: ierr

    call deliver(c_protect(int(id, c_int), ptr, count, int(dtype, c_int)), 'cairn_protect', ierr)
  end subroutine

  !> Stop protecting region id.
  subroutine cairn_unprotect(id, ierr)
    integer, intent(in) :: id
    integer, intent(out), optional :: ierr

    call deliver(c_unprotect(int(id, c_int)), 'cairn_unprotect', ierr)
  end subroutine

  ! ---- 3. Checkpoint and restart -------------------------------------------------------------

  !> Write checkpoint version of name from all protected regions. Collective; returns once the
  !> checkpoint is captured on every rank. Versions of a name must increase within a run.
  subroutine cairn_checkpoint(name, version, ierr)
    character(len=*), intent(in) :: name
    integer(int64), intent(in) :: version
    integer, intent(out), optional :: ierr

    call deliver(c_checkpoint(c_string(name), int(version, c_int64_t)), 'cairn_checkpoint', ierr)
  end subroutine

  !> Set version to the newest version of name every rank can restore, or -1. Collective.
  subroutine cairn_restart_test(name, version, ierr)
    character(len=*), intent(in) :: name
    integer(int64), intent(out) :: version
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: v

    v = -1
    call deliver(c_restart_test(c_string(name), v), 'cairn_restart_test', ierr)
    version = int(v, int64)
  end subroutine

  !> Fill the protected regions from checkpoint version of name. Collective. If it is damaged
  !> on any rank, the newest older checkpoint every rank can restore is used instead;
  !> cairn_restart_version tells which version was restored.
  subroutine cairn_restart(name, version, ierr)
    character(len=*), intent(in) :: name
    integer(int64), intent(in) :: version
    integer, intent(out), optional :: ierr

    call deliver(c_restart(c_string(name), int(version, c_int64_t)), 'cairn_restart', ierr)
  end subroutine

  !> Set version to the version restored by the last restart in this run, or -1.
  subroutine cairn_restart_version(version, ierr)
    integer(int64), intent(out) :: version
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: v

    v = -1
    call deliver(c_restart_version(v), 'cairn_restart_version', ierr)
    version = int(v, int64)
  end subroutine

  !> Restart in one call: if a checkpoint of name exists, restore the newest one every rank can
  !> restore and set version to it; otherwise set version to -1 and leave the regions alone.
  !> Collective.
  subroutine cairn_resume(name, version, ierr)
    character(len=*), intent(in) :: name
    integer(int64), intent(out), optional :: version
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: v

    v = -1
    call deliver(c_resume(c_string(name), v), 'cairn_resume', ierr)
    if (present(version)) version = int(v, int64)
  end subroutine

  !> Set state to the lifecycle state (CAIRN_STATE_*) of checkpoint version of name, after
  !> publishing the background flushes that have finished on every rank. Collective.
  subroutine cairn_test(name, version, state, ierr)
    character(len=*), intent(in) :: name
    integer(int64), intent(in) :: version
    integer, intent(out) :: state
    integer, intent(out), optional :: ierr
    integer(c_int) :: s

    s = CAIRN_STATE_NONE
    call deliver(c_test(c_string(name), int(version, c_int64_t), s), 'cairn_test', ierr)
    state = int(s)
  end subroutine

  !> Wait until checkpoint version of name is durable on the global tier. Collective.
  subroutine cairn_wait(name, version, ierr)
    character(len=*), intent(in) :: name
    integer(int64), intent(in) :: version
    integer, intent(out), optional :: ierr

    call deliver(c_wait(c_string(name), int(version, c_int64_t)), 'cairn_wait', ierr)
  end subroutine

  ! ---- 3. The checkpoint and exit policy -----------------------------------------------------

  !> Set due to .true. if the configured policy ([checkpoint] every / seconds) says a
  !> checkpoint is due. Each call counts as one step. Collective when a time policy is set.
  subroutine cairn_need_checkpoint(due, ierr)
    logical, intent(out) :: due
    integer, intent(out), optional :: ierr
    integer(c_int) :: flag

    flag = 0
    call deliver(c_need_checkpoint(flag), 'cairn_need_checkpoint', ierr)
    due = flag /= 0
  end subroutine

  !> Checkpoint version of name if cairn_need_checkpoint says one is due. Collective.
  subroutine cairn_checkpoint_if_due(name, version, ierr)
    character(len=*), intent(in) :: name
    integer(int64), intent(in) :: version
    integer, intent(out), optional :: ierr

    call deliver(c_checkpoint_if_due(c_string(name), int(version, c_int64_t)), &
      'cairn_checkpoint_if_due', ierr)
  end subroutine

  !> Set exit_now to .true. when the run should stop now (time limit near, halt file, SIGTERM
  !> or SIGUSR1 with [exit] signals). Collective: every rank gets the same answer.
  subroutine cairn_should_exit(exit_now, ierr)
    logical, intent(out) :: exit_now
    integer, intent(out), optional :: ierr
    integer(c_int) :: flag

    flag = 0
    call deliver(c_should_exit(flag), 'cairn_should_exit', ierr)
    exit_now = flag /= 0
  end subroutine

  ! ---- 3. Error messages ---------------------------------------------------------------------

  !> The message of the last failed call ('' if none): where it failed and why.
  function cairn_last_error() result(message)
    character(len=:), allocatable :: message

    if (own_error_is_last) then
      message = own_error
    else
      message = f_string(c_last_error())
    end if
  end function

  !> A short description of an error code.
  function cairn_strerror(code) result(text)
    integer, intent(in) :: code
    character(len=:), allocatable :: text

    text = f_string(c_strerror(int(code, c_int)))
  end function

  ! ---- 4. Helpers ----------------------------------------------------------------------------

  ! A NUL-terminated copy of s without its trailing blanks, for a character(kind=c_char) :: x(*)
  ! argument of C.
  pure function c_string(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=:), allocatable :: c

    c = trim(s) // c_null_char
  end function

  ! Whether an optional string argument is there and not blank: Fortran has no null string,
  ! and a CHARACTER variable that was never set is blank.
  logical function given(s)
    character(len=*), intent(in), optional :: s

    given = present(s)
    if (given) given = len_trim(s) > 0
  end function

  ! A copy of the NUL-terminated C string at p ('' for NULL).
  function f_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n

    if (.not. c_associated(p)) then
      s = ''
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate (character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function

  ! Hand the code of a libcairn call to the caller (see "Errors" at the top).
  subroutine deliver(rc, what, ierr)
    integer(c_int), intent(in) :: rc
    character(len=*), intent(in) :: what
    integer, intent(out), optional :: ierr

    if (rc /= CAIRN_OK) own_error_is_last = .false.
    call report(int(rc), what, ierr)
  end subroutine

  ! Record a failure the module found itself and hand it to the caller.
  subroutine fail(code, message, what, ierr)
    integer, intent(in) :: code
    character(len=*), intent(in) :: message, what
    integer, intent(out), optional :: ierr

    own_error = message
    own_error_is_last = .true.
    call report(code, what, ierr)
  end subroutine

  subroutine report(code, what, ierr)
    integer, intent(in) :: code
    character(len=*), intent(in) :: what
    integer, intent(out), optional :: ierr

    if (present(ierr)) then
      ierr = code
    else if (code /= CAIRN_OK) then
      write (error_unit, '(6a)') 'cairn: ', what, ' failed: ', cairn_strerror(code), ': ', &
        cairn_last_error()
      flush (error_unit)
    end if
  end subroutine

end module cairn
