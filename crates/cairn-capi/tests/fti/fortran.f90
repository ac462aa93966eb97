! fortran.f90 -- FTI's Fortran module (USE FTI) on Cairn: a scalar pointer, a 2-D real
! pointer array, an integer(8) array, a logical and a character array protected with
! FTI_Protect, and a derived type described as FTI's composite type (FTI_InitCompositeType,
! FTI_AddScalarField, FTI_AddVectorField with the FTI_INTEGER4 / FTI_REAL8 handles) protected
! through its C pointer, checkpointed at level 1, and recovered by a second run. Built with
! mpif90 against Cairn's fti.mod, linked with -lfti.
!
! Usage: fortran CONFIG first|second
!   first:  three checkpoints, then stops without FTI_Finalize (as a failed run);
!   second: FTI_Status is not 0, FTI_Recover, every value checked, FTI_Finalize.
! Output (rank 0): "fortran: wrote ok" or "fortran: recovered ok"; a failed check prints
! "fortran: rank <r> FAIL <what>" and stops with code 5.
program fortran
  use, intrinsic :: iso_c_binding, only: c_loc, c_size_t
  use mpi
  use FTI
  implicit none
  type :: particle
    integer(4) :: id
    real(8) :: pos(3)
  end type
  character(len=256) :: cfg, mode
  integer :: err, comm, rank, status, i, j, step
  integer, pointer :: iter
  real(8), pointer :: field(:, :)
  integer(8), target :: counts(100)
  logical, target :: flag
  character(len=8), target :: tags(3)
  type(particle), target :: parts(4)
  integer :: ptype, dims(1)

  call MPI_INIT(err)
  call get_command_argument(1, cfg)
  call get_command_argument(2, mode)
  comm = MPI_COMM_WORLD
  call FTI_Init(trim(cfg), comm, err)
  call check(err == FTI_SCES, 'FTI_Init')
  call MPI_COMM_RANK(comm, rank, err)
  allocate (iter, field(50, 20))
  call FTI_Protect(0, iter, err)
  call check(err == FTI_SCES, 'FTI_Protect(iter)')
  call FTI_Protect(1, field, err)
  call check(err == FTI_SCES, 'FTI_Protect(field)')
  call FTI_Protect(2, counts, err)
  call check(err == FTI_SCES, 'FTI_Protect(counts)')
  call FTI_Protect(3, flag, err)
  call check(err == FTI_SCES, 'FTI_Protect(flag)')
  call FTI_Protect(4, tags, err)
  call check(err == FTI_SCES, 'FTI_Protect(tags)')
  ptype = FTI_InitCompositeType('particle', sizeof(parts(1)))
  call check(ptype >= 0, 'FTI_InitCompositeType')
  call check(FTI_AddScalarField(ptype, 'id', FTI_INTEGER4, int(0, c_size_t)) == FTI_SCES, &
             'FTI_AddScalarField')
  dims(1) = 3
  call check(FTI_AddVectorField(ptype, 'pos', FTI_REAL8, int(8, c_size_t), 1, dims) == FTI_SCES, &
             'FTI_AddVectorField')
  ! A field beyond the type's end is refused.
  call check(FTI_AddScalarField(ptype, 'bad', FTI_REAL8, sizeof(parts(1))) /= FTI_SCES, &
             'a field outside the type refused')
  call FTI_Protect(5, c_loc(parts), 4, ptype, err)
  call check(err == FTI_SCES, 'FTI_Protect(parts)')
  call FTI_Status(status)

  if (trim(mode) == 'first') then
    call check(status == 0, 'a fresh start')
    do step = 1, 3
      call fill(step)
      call FTI_Checkpoint(step, 1, err)
      call check(err == FTI_DONE, 'FTI_Checkpoint')
    end do
    if (rank == 0) print '(a)', 'fortran: wrote ok'
    call MPI_FINALIZE(err)
    stop
  end if

  call check(status /= 0, 'a restart')
  iter = -1
  field = 0
  counts = 0
  flag = .false.
  tags = ''
  parts = particle(0, 0.0_8)
  call FTI_Recover(err)
  call check(err == FTI_SCES, 'FTI_Recover')
  step = iter
  call check(step == 3, 'iter restored')
  do j = 1, 20
    do i = 1, 50
      ! The same bits: the restored value is what was stored, not a recomputation.
      call check(transfer(field(i, j), 0_8) == transfer(value(i, j, step), 0_8), 'field')
    end do
  end do
  call check(all(counts == [(int(i, 8) * 1000_8 + int(rank, 8), i = 1, 100)]), 'counts')
  call check(flag .and. tags(2) == 'tag-3', 'flag and tags')
  do i = 1, 4
    call check(parts(i)%id == 10 * i + rank .and. &
               all(transfer(parts(i)%pos, 0_8, 3) == transfer(value(i, 1, step), 0_8)), 'parts')
  end do
  if (rank == 0) print '(a)', 'fortran: recovered ok'
  call FTI_Finalize(err)
  call check(err == FTI_SCES, 'FTI_Finalize')
  call MPI_FINALIZE(err)

contains

  real(8) function value(i, j, s)
    integer, intent(in) :: i, j, s
    value = real(i, 8) + 100.0_8 * real(j, 8) + 0.5_8 * real(s, 8) + real(rank, 8)
  end function

  subroutine fill(s)
    integer, intent(in) :: s
    iter = s
    do j = 1, 20
      do i = 1, 50
        field(i, j) = value(i, j, s)
      end do
    end do
    counts = [(int(i, 8) * 1000_8 + int(rank, 8), i = 1, 100)]
    flag = .true.
    write (tags(2), '(a,i0)') 'tag-', s
    do i = 1, 4
      parts(i) = particle(10 * i + rank, value(i, 1, s))
    end do
  end subroutine

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      print '(a,i0,a,a)', 'fortran: rank ', rank, ' FAIL ', what
      error stop 5
    end if
  end subroutine
end program fortran
