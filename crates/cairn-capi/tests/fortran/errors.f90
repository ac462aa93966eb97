! errors.f90: calls of the Fortran module that must fail, each with its code and libcairn's (or
! the module's) message, and never stop or abort the program. An MPI program; run it under
! mpirun with the path of a configuration file that has an unknown key as its argument.
!
! Rank 0 prints one line per case, "errors: <case>: <code> <description>: <message>", plus
! "errors: still running" after a failure reported without ierr and "errors: done" at the end.
program errors
  use, intrinsic :: iso_fortran_env, only: int64, real64, output_unit
  use mpi
  use cairn
  implicit none

  real(real64), target :: grid(4, 4)
  character(len=256) :: bad_config
  integer :: ierr, e, rank

  call get_command_argument(1, bad_config)

  ! The message stays cairn_last_error() until the next failure, so it is shown once the rank
  ! is known.
  call cairn_init(MPI_COMM_WORLD, ierr=ierr)
  call mpi_init(e)
  call mpi_comm_rank(MPI_COMM_WORLD, rank, e)
  call show('init before MPI_Init')

  call cairn_protect(1, grid, ierr)
  call show('protect before init')
  ! Without ierr the failure goes to error_unit, and the program goes on.
  call cairn_checkpoint('errors', 1_int64)
  if (rank == 0) write (output_unit, '(a)') 'errors: still running'

  call cairn_config_set('cache.kepp', '3', ierr)
  call show('config_set of an unknown key')
  call cairn_init(123456, ierr=ierr)
  call show('init with an unknown handle')
  call cairn_init(MPI_COMM_NULL, ierr=ierr)
  call show('init with MPI_COMM_NULL')
  call cairn_init(MPI_COMM_WORLD, bad_config, ierr)
  call show('init with a bad configuration file')

  call cairn_init(MPI_COMM_WORLD, ierr=ierr)
  call show('init')
  call cairn_protect(1, grid(1:4:2, :), ierr)
  call show('protect of a non-contiguous section')
  call cairn_unprotect(99, ierr)
  call show('unprotect of an unknown id')
  call cairn_restart('errors', 7_int64, ierr)
  call show('restart of a missing version')
  call cairn_finalize(ierr)
  call show('finalize')
  call cairn_finalize(ierr)
  call show('finalize again')

  call mpi_finalize(e)
  call cairn_init(MPI_COMM_WORLD, ierr=ierr)
  call show('init after MPI_Finalize')
  if (rank == 0) write (output_unit, '(a)') 'errors: done'

contains

  subroutine show(what)
    character(len=*), intent(in) :: what

    if (rank /= 0) return
    if (ierr == CAIRN_OK) then
      write (output_unit, '(3a)') 'errors: ', what, ': ok'
    else
      write (output_unit, '(3a, i0, 4a)') 'errors: ', what, ': ', ierr, ' ', &
        cairn_strerror(ierr), ': ', cairn_last_error()
    end if
    flush (output_unit)
  end subroutine

end program errors
