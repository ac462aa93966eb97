! ckpt.f90 -- SCR's Fortran interface (scrf.h) on Cairn: a program that writes three
! checkpoints of one file per rank through SCR_ROUTE_FILE and, when started again,
! restarts from the newest (or, with CKPT_CURRENT set, from the one SCR_CURRENT names,
! called before SCR_HAVE_RESTART), reading its file back by its bare name, as SCR 1.x
! programs did. Built with mpif90 against Cairn's scrf.h, linked with -lscr.
!
! Output (rank 0): "ckpt: restarted <name> ok" or "ckpt: fresh", then "ckpt: wrote ok".
! A failed check prints "ckpt: rank <r> FAIL <what>" and stops with code 5.
program ckpt
  use mpi
  implicit none
  include 'scrf.h'
  character(len=SCR_MAX_FILENAME) :: name, routed, current
  character(len=64) :: fname
  integer :: ierr, rank, flag, valid, step, i, ios, clen, first
  integer(kind=8) :: values(1000), back(1000)

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call SCR_INIT(ierr)
  call check(ierr == SCR_SUCCESS, 'SCR_INIT')

  call get_environment_variable('CKPT_CURRENT', current, clen)
  if (clen > 0) then
    call SCR_CURRENT(current, ierr)
    call check(ierr == SCR_SUCCESS, 'SCR_CURRENT')
  end if

  write (fname, '(a,i0,a)') 'state.', rank, '.dat'
  first = 1
  call SCR_HAVE_RESTART(flag, name, ierr)
  call check(ierr == SCR_SUCCESS, 'SCR_HAVE_RESTART')
  if (flag == 1) then
    call SCR_START_RESTART(name, ierr)
    call check(ierr == SCR_SUCCESS, 'SCR_START_RESTART')
    read (name(6:), *) step
    call SCR_ROUTE_FILE(fname, routed, ierr)
    call check(ierr == SCR_SUCCESS, 'SCR_ROUTE_FILE by its bare name')
    open (unit=10, file=routed, form='unformatted', action='read', iostat=ios)
    read (10, iostat=ios) back
    close (10)
    call fill(step)
    valid = 0
    if (ios == 0 .and. all(back == values)) valid = 1
    call SCR_COMPLETE_RESTART(valid, ierr)
    call check(ierr == SCR_SUCCESS .and. valid == 1, 'restored values')
    if (rank == 0) print '(a,a,a)', 'ckpt: restarted ', trim(name), ' ok'
    first = step + 1
  else
    if (rank == 0) print '(a)', 'ckpt: fresh'
  end if

  do step = first, first + 2
    call fill(step)
    write (name, '(a,i0)') 'ckpt.', step
    call SCR_START_OUTPUT(name, SCR_FLAG_CHECKPOINT, ierr)
    call check(ierr == SCR_SUCCESS, 'SCR_START_OUTPUT')
    call SCR_ROUTE_FILE('out/' // fname, routed, ierr)
    call check(ierr == SCR_SUCCESS, 'SCR_ROUTE_FILE')
    open (unit=10, file=routed, form='unformatted', action='write', status='replace')
    write (10) values
    close (10)
    call SCR_COMPLETE_OUTPUT(1, ierr)
    call check(ierr == SCR_SUCCESS, 'SCR_COMPLETE_OUTPUT')
  end do
  if (rank == 0) print '(a)', 'ckpt: wrote ok'
  call SCR_FINALIZE(ierr)
  call MPI_FINALIZE(ierr)

contains

  subroutine fill(s)
    integer, intent(in) :: s
    do i = 1, size(values)
      values(i) = int(s, 8) * 100000_8 + int(i, 8) * 7_8 + int(rank, 8)
    end do
  end subroutine fill

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      print '(a,i0,a,a)', 'ckpt: rank ', rank, ' FAIL ', what
      error stop 5
    end if
  end subroutine check
end program ckpt
