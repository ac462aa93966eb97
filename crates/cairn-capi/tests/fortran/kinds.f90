! kinds.f90: every element type cairn_protect takes, as scalars and arrays of ranks 1 to 4, plus
! an array of a derived type through cairn_protect_ptr and an empty array, checkpointed and
! restored bit for bit in one process (cairn_init_solo).
!
!   kinds          fill, checkpoint v1, overwrite, restart v1 in the same run, check
!   kinds --again  a new process: overwrite, cairn_resume (must find v1), check
!
! Prints "kinds: <region> ok" or "kinds: <region> MISMATCH" per region and "kinds: resumed v<v>",
! then "kinds: done"; a failed Cairn call prints "kinds: <call> failed: ..." and exits 5.
program kinds
  use, intrinsic :: iso_c_binding, only: c_loc, c_intptr_t
  use, intrinsic :: iso_fortran_env, only: int8, int16, int32, int64, real32, real64, &
    output_unit, error_unit
  use cairn
  implicit none

  type :: particle
    real(real64) :: x(3)
    integer(int32) :: tag
  end type

  type :: bytes
    integer(int8), allocatable :: b(:)
  end type

  integer(int8), target :: i8(37)
  integer(int16), target :: i16(3, 5)
  integer(int32), target :: i32
  integer(int64), target :: i64(2, 3, 4)
  real(real32), target :: r32(11)
  real(real64), target :: r64(2, 2, 2, 2)
  complex(real32), target :: c32
  complex(real64), target :: c64(3, 2)
  logical, target :: flags(6)
  character(len=7), target :: label, labels(3)
  type(particle), target :: parts(4)
  real(real64), allocatable, target :: empty(:)
  character(len=32) :: mode
  character(len=16), parameter :: names(12) = [character(len=16) :: 'int8', 'int16', &
    'int32', 'int64', 'real32', 'real64', 'complex32', 'complex64', 'logical', 'character', &
    'character array', 'derived type']
  integer :: ierr, codes(13)
  integer(int64) :: version

  call get_command_argument(1, mode)
  allocate (empty(0))

  call cairn_init_solo(ierr=ierr)
  call check(ierr, 'cairn_init_solo')
  call cairn_protect(1, i8, codes(1))
  call cairn_protect(2, i16, codes(2))
  call cairn_protect(3, i32, codes(3))
  call cairn_protect(4, i64, codes(4))
  call cairn_protect(5, r32, codes(5))
  call cairn_protect(6, r64, codes(6))
  call cairn_protect(7, c32, codes(7))
  call cairn_protect(8, c64, codes(8))
  call cairn_protect(9, flags, codes(9))
  call cairn_protect(10, label, codes(10))
  call cairn_protect(11, labels, codes(11))
  call cairn_protect_ptr(12, c_loc(parts), &
    int(storage_size(parts) / 8 * size(parts), c_intptr_t), CAIRN_BYTE, codes(12))
  call cairn_protect(13, empty, codes(13))
  call check(minval(codes), 'cairn_protect')

  if (mode == '--again') then
    call overwrite()
    call cairn_resume('kinds', version, ierr)
    call check(ierr, 'cairn_resume')
    write (output_unit, '(a, i0)') 'kinds: resumed v', version
  else
    call fill()
    call cairn_checkpoint('kinds', 1_int64, ierr)
    call check(ierr, 'cairn_checkpoint')
    call overwrite()
    call cairn_restart('kinds', 1_int64, ierr)
    call check(ierr, 'cairn_restart')
    call cairn_restart_version(version, ierr)
    call check(ierr, 'cairn_restart_version')
    write (output_unit, '(a, i0)') 'kinds: restarted v', version
  end if
  call compare()

  call cairn_finalize(ierr)
  call check(ierr, 'cairn_finalize')
  write (output_unit, '(a)') 'kinds: done'

contains

  ! Values whose bytes are all distinct from overwrite()'s, NaN and signed zero included.
  subroutine fill()
    integer :: k, a, b, c, d

    i8 = [(int(k * 5 - 100, int8), k = 1, size(i8))]
    i16 = reshape([(int(k * 1000 - 7000, int16), k = 1, size(i16))], shape(i16))
    i32 = -123456789
    i64 = reshape([(int(k, int64) * 3000000000_int64 - 1, k = 1, size(i64))], shape(i64))
    r32 = [(real(k, real32) / 3, k = 1, size(r32))]
    r32(5) = -0.0_real32
    r32(6) = ieee_nan32()
    do concurrent (a = 1:2, b = 1:2, c = 1:2, d = 1:2)
      r64(a, b, c, d) = 1 / real(a + 2 * b + 4 * c + 8 * d, real64)
    end do
    c32 = cmplx(1.5, -2.25, real32)
    c64 = reshape([(cmplx(k, -k / 7.0_real64, real64), k = 1, size(c64))], shape(c64))
    flags = [.true., .false., .true., .true., .false., .true.]
    label = 'Fortran'
    labels = ['alpha  ', 'beta   ', 'gamma  ']
    do k = 1, size(parts)
      parts(k) = particle([k * 0.5_real64, -k * 1.0_real64, k / 3.0_real64], k * 11)
    end do
  end subroutine

  subroutine overwrite()
    i8 = 0
    i16 = 0
    i32 = 0
    i64 = 0
    r32 = 9
    r64 = 9
    c32 = 9
    c64 = 9
    flags = .false.
    label = ''
    labels = ''
    parts = particle([9.0_real64, 9.0_real64, 9.0_real64], 0)
  end subroutine

  real(real32) function ieee_nan32()
    ieee_nan32 = transfer(int(z'7fc00001', int32), 1.0_real32)
  end function

  ! Compare every region with fill()'s values, byte for byte: keep the restored bytes, fill,
  ! and compare region by region.
  subroutine compare()
    type(bytes) :: restored(size(names))
    integer :: k

    do k = 1, size(names)
      restored(k)%b = region(k)
    end do
    call fill()
    do k = 1, size(names)
      if (all(restored(k)%b == region(k))) then
        write (output_unit, '(3a)') 'kinds: ', trim(names(k)), ' ok'
      else
        write (output_unit, '(3a)') 'kinds: ', trim(names(k)), ' MISMATCH'
      end if
    end do
  end subroutine

  ! The bytes of region k, in the order of `names`.
  function region(k) result(b)
    integer, intent(in) :: k
    integer(int8), allocatable :: b(:)

    select case (k)
    case (1)
      b = transfer(i8, [0_int8])
    case (2)
      b = transfer(i16, [0_int8])
    case (3)
      b = transfer(i32, [0_int8])
    case (4)
      b = transfer(i64, [0_int8])
    case (5)
      b = transfer(r32, [0_int8])
    case (6)
      b = transfer(r64, [0_int8])
    case (7)
      b = transfer(c32, [0_int8])
    case (8)
      b = transfer(c64, [0_int8])
    case (9)
      b = transfer(flags, [0_int8])
    case (10)
      b = transfer(label, [0_int8])
    case (11)
      b = transfer(labels, [0_int8])
    case default
      b = transfer(parts, [0_int8])
    end select
  end function

  subroutine check(rc, call)
    integer, intent(in) :: rc
    character(len=*), intent(in) :: call

    if (rc == CAIRN_OK) return
    write (error_unit, '(6a)') 'kinds: ', call, ' failed: ', cairn_strerror(rc), ': ', &
      cairn_last_error()
    stop 5, quiet = .true.
  end subroutine

end program kinds
