! heat2d.f90 -- examples/heat2d.c in Fortran: 2D heat diffusion that checkpoints and restarts
! with Cairn's Fortran module.
!
! The program solves the heat equation on an N x N grid with a Jacobi 5-point stencil. The grid
! is split into contiguous blocks of rows, one block per rank (the rank count must divide N);
! each rank keeps one halo row above and below its block and exchanges them with its neighbours
! (MPI_Sendrecv) at the start of every step. The top edge of the grid is held at 1.0 and the
! other three at 0.0, so heat flows down from the top.
!
! The local field is u(cols, 0:rows+1): a column of u is a row of the grid, so the field has the
! memory layout of heat2d.c's, and the arithmetic is the same operation by operation (the
! parentheses fix the order of the additions). Both programs therefore print the same final
! checksum for the same arguments, and either one can resume the other's checkpoints: both
! protect the step counter as region 0 and the field with its halo rows as region 1.
!
! Cairn usage, the lines marked "Cairn" below: `use cairn`; cairn_init; cairn_protect of the
! step counter and the field; cairn_resume before the loop restores the newest checkpoint, if
! any; every K steps cairn_checkpoint(name, step) captures "step steps completed";
! cairn_finalize. A run killed and started again continues from its last checkpoint and ends
! with exactly the checksum of an uninterrupted run.
!
! Build: native/fortran/build.sh PREFIX (after installing libcairn into PREFIX/lib), or
!   mpif90 -O2 -I PREFIX/include -o heat2d_f examples/heat2d.f90 \
!          -L PREFIX/lib -lcairnf -lcairn -Wl,-rpath,PREFIX/lib
! Run:
!   mpirun -n 4 ./heat2d_f --n 512 --steps 1000 --every 100 [--name heat2d] [--config cairn.toml]
!          [--sleep-ms 0]
! Output lines start with "heat2d:", as heat2d.c's; the last one is a 64-bit FNV-1a checksum of
! the whole field. Exit codes: 0 success, 2 bad arguments, 3 a Cairn call failed.
program heat2d
  use, intrinsic :: iso_c_binding, only: c_int
  use, intrinsic :: iso_fortran_env, only: int8, int64, real64, output_unit, error_unit
  use mpi
  use cairn                                                           ! Cairn
  implicit none

  interface
    ! usleep(3), for --sleep-ms: standard Fortran cannot sleep.
    integer(c_int) function usleep(microseconds) bind(c, name='usleep')
      import :: c_int
      integer(c_int), value :: microseconds
    end function
  end interface

  integer(int64) :: n = 512, steps = 1000, every = 100, sleep_ms = 0
  character(len=:), allocatable :: name, config, opt, val
  integer :: rank, nranks, ierr, rows, cols, up, down, lo, hi, i, j, k
  real(real64), allocatable, target :: u(:, :)
  real(real64), allocatable :: next(:, :)
  integer(int64), target :: step = 0
  integer(int64) :: restored, checkpoints = 0
  integer(int64) :: hash(2)  ! the FNV-1a hash as its high and low 32 bits
  real(real64) :: t0, dt, ckpt_seconds = 0, max_seconds
  character(len=16) :: hex
  character(len=160) :: msg

  call mpi_init(ierr)
  call mpi_comm_rank(MPI_COMM_WORLD, rank, ierr)
  call mpi_comm_size(MPI_COMM_WORLD, nranks, ierr)

  name = 'heat2d'
  config = ''  ! none: $CAIRN_CONFIG or the defaults
  k = 1
  do while (k <= command_argument_count())
    opt = argument(k)
    if (opt == '--help') call usage_exit('', 0)
    if (k + 1 > command_argument_count()) call usage_exit('missing value or unknown option', 2)
    val = argument(k + 1)
    k = k + 2
    select case (opt)
    case ('--n')
      n = parse_count(opt, val, 3_int64)
    case ('--steps')
      steps = parse_count(opt, val, 0_int64)
    case ('--every')
      every = parse_count(opt, val, 0_int64)
    case ('--sleep-ms')
      sleep_ms = parse_count(opt, val, 0_int64)
    case ('--name')
      name = val
    case ('--config')
      config = val
    case default
      call usage_exit('unknown option', 2)
    end select
  end do
  if (mod(n, int(nranks, int64)) /= 0) then
    write (msg, '(a, i0, a, i0, a)') 'the rank count (', nranks, ') must divide N (', n, ')'
    call usage_exit(trim(msg), 2)
  end if

  ! Local block: `rows` owned rows plus a halo row above (index 0) and below (rows + 1).
  cols = int(n)
  rows = int(n / nranks)
  allocate (u(cols, 0:rows + 1), next(cols, 0:rows + 1))
  u = 0
  if (rank == 0) u(:, 1) = 1  ! global row 0: the hot top edge

  ! The protected state is exactly (step, u): `next` is scratch rebuilt every step.
  call cairn_init(MPI_COMM_WORLD, config, ierr)                       ! Cairn
  call check(ierr, 'cairn_init')
  call cairn_protect(0, step, ierr)                                   ! Cairn
  call check(ierr, 'cairn_protect')
  call cairn_protect(1, u, ierr)                                      ! Cairn
  call check(ierr, 'cairn_protect')

  call cairn_resume(name, restored, ierr)                             ! Cairn
  call check(ierr, 'cairn_resume')
  if (rank == 0) then
    if (restored >= 0) then
      write (output_unit, '(a, i0, a, i0, a)') 'heat2d: restarted from checkpoint v', &
        restored, ' (step ', step, ')'
    else
      write (output_unit, '(a)') 'heat2d: no checkpoint, starting fresh'
    end if
    flush (output_unit)
  end if
  if (restored >= 0 .and. step /= restored) &  ! every checkpoint is written with version == step
    write (error_unit, '(a, i0, a, i0)') 'heat2d: warning: restored step ', step, &
    ' differs from version ', restored
  ! The stencil never writes the fixed edges of `next`, so they must be copied from the
  ! (possibly restored) field once; each step then copies `next` back into `u`.
  next = u

  up = MPI_PROC_NULL
  if (rank > 0) up = rank - 1
  down = MPI_PROC_NULL
  if (rank < nranks - 1) down = rank + 1
  ! Rows that the stencil updates: all owned rows except the global top and bottom edges.
  lo = 1
  if (rank == 0) lo = 2
  hi = rows
  if (rank == nranks - 1) hi = rows - 1

  do while (step < steps)
    ! Send the first owned row up and receive the lower halo from below, then the reverse.
    call mpi_sendrecv(u(:, 1), cols, MPI_DOUBLE_PRECISION, up, 0, &
      u(:, rows + 1), cols, MPI_DOUBLE_PRECISION, down, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    call mpi_sendrecv(u(:, rows), cols, MPI_DOUBLE_PRECISION, down, 1, &
      u(:, 0), cols, MPI_DOUBLE_PRECISION, up, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)

    do i = lo, hi
      do j = 2, cols - 1
        next(j, i) = 0.25_real64 * (((u(j, i - 1) + u(j, i + 1)) + u(j - 1, i)) + u(j + 1, i))
      end do
    end do
    ! Copy back rather than swap arrays, so the protected region stays the live field.
    u(:, 1:rows) = next(:, 1:rows)
    step = step + 1

    ! Here (step, u) means "step steps completed". Because the checkpoint follows the
    ! increment, a resumed run never checkpoints its restored version again. (Fortran may
    ! evaluate every operand of .and., hence max: no mod by zero when every is 0.)
    if (every > 0 .and. mod(step, max(every, 1_int64)) == 0 .and. step /= restored) then
      t0 = mpi_wtime()
      call cairn_checkpoint(name, step, ierr)                         ! Cairn
      call check(ierr, 'cairn_checkpoint')
      dt = mpi_wtime() - t0
      ckpt_seconds = ckpt_seconds + dt
      checkpoints = checkpoints + 1
      if (rank == 0) then
        write (output_unit, '(a, i0, a, i0, 3a)') 'heat2d: step ', step, ' checkpoint v', &
          step, ' ', milliseconds(dt), ' ms'
        flush (output_unit)
      end if
    end if
    if (sleep_ms > 0) ierr = int(usleep(int(sleep_ms * 1000, c_int)))
  end do

  ! Checksum: one FNV-1a pass over the owned rows of the whole grid in row order. The running
  ! hash travels down the ranks, so the result is the same for any rank count.
  hash = [int(z'cbf29ce4', int64), int(z'84222325', int64)]
  if (rank > 0) call mpi_recv(hash, 2, MPI_INTEGER8, rank - 1, 2, MPI_COMM_WORLD, &
    MPI_STATUS_IGNORE, ierr)
  call fnv1a(hash, transfer(u(:, 1:rows), [0_int8]))
  if (rank < nranks - 1) call mpi_send(hash, 2, MPI_INTEGER8, rank + 1, 2, MPI_COMM_WORLD, ierr)
  if (nranks > 1 .and. rank == nranks - 1) &
    call mpi_send(hash, 2, MPI_INTEGER8, 0, 3, MPI_COMM_WORLD, ierr)
  if (nranks > 1 .and. rank == 0) &
    call mpi_recv(hash, 2, MPI_INTEGER8, nranks - 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)

  ! The slowest rank's total is the job's checkpoint time.
  call mpi_reduce(ckpt_seconds, max_seconds, 1, MPI_DOUBLE_PRECISION, MPI_MAX, 0, &
    MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    write (hex, '(2z8.8)') hash
    write (output_unit, '(a, i0, a, i0, 3a)') 'heat2d: steps ', steps, ' checkpoints ', &
      checkpoints, ' checkpoint-time ', milliseconds(max_seconds), ' ms'
    write (output_unit, '(2a)') 'heat2d: final checksum ', lower(hex)
    flush (output_unit)
  end if

  call cairn_finalize(ierr)                                           ! Cairn
  call check(ierr, 'cairn_finalize')
  call mpi_finalize(ierr)

contains

  ! Abort the job with exit code 3 if a Cairn call failed, saying which call and why.
  subroutine check(rc, call)
    integer, intent(in) :: rc
    character(len=*), intent(in) :: call
    integer :: e

    if (rc == CAIRN_OK) return
    write (error_unit, '(6a)') 'heat2d: ', call, ' failed: ', cairn_strerror(rc), ': ', &
      cairn_last_error()
    flush (error_unit)
    call mpi_abort(MPI_COMM_WORLD, 3, e)
  end subroutine

  ! Print the usage (after `msg`, if any) once and leave. Every rank sees the same arguments,
  ! so every rank takes this path together and no MPI_Abort is needed.
  subroutine usage_exit(msg, code)
    character(len=*), intent(in) :: msg
    integer, intent(in) :: code
    integer :: unit, e

    if (rank == 0) then
      unit = output_unit
      if (code /= 0) unit = error_unit
      if (msg /= '') write (unit, '(2a)') 'heat2d: ', msg
      write (unit, '(a)') 'usage: heat2d_f [--n N] [--steps S] [--every K] [--name NAME] ' // &
        '[--config PATH] [--sleep-ms M]'
      flush (unit)
    end if
    call mpi_finalize(e)
    stop code, quiet = .true.
  end subroutine

  function argument(index) result(text)
    integer, intent(in) :: index
    character(len=:), allocatable :: text
    integer :: length

    call get_command_argument(index, length=length)
    allocate (character(len=length) :: text)
    call get_command_argument(index, text)
  end function

  function parse_count(opt, text, min) result(v)
    character(len=*), intent(in) :: opt, text
    integer(int64), intent(in) :: min
    integer(int64) :: v
    integer :: status

    status = 1
    if (text /= '' .and. verify(text, '0123456789') == 0 .and. len(text) <= 18) &
      read (text, *, iostat=status) v
    if (status /= 0 .or. v < min) then
      write (msg, '(2a, i0, 3a)') opt, ' needs an integer >= ', min, ", got '", text, "'"
      call usage_exit(trim(msg), 2)
    end if
  end function

  ! 64-bit FNV-1a over `bytes`, continued from `h`. Fortran integers do not wrap around, so h is
  ! kept as two 32-bit halves and the multiplication by the FNV prime 2^40 + 435 is done in
  ! pieces below 2^42: (H 2^32 + L)(2^40 + 435) mod 2^64 = (H 435 + L 2^8) 2^32 + L 435.
  subroutine fnv1a(h, bytes)
    integer(int64), intent(inout) :: h(2)
    integer(int8), intent(in) :: bytes(:)
    integer(int64), parameter :: low32 = int(z'ffffffff', int64)
    integer(int64) :: a, b
    integer :: p

    do p = 1, size(bytes)
      h(2) = ieor(h(2), iand(int(bytes(p), int64), 255_int64))
      a = h(2) * 435
      b = h(1) * 435 + h(2) * 256 + ishft(a, -32)
      h = [iand(b, low32), iand(a, low32)]
    end do
  end subroutine

  ! `seconds` in milliseconds with three decimals, as C's "%.3f" prints it.
  function milliseconds(seconds) result(text)
    real(real64), intent(in) :: seconds
    character(len=:), allocatable :: text
    character(len=32) :: buf

    write (buf, '(f32.3)') seconds * 1e3_real64
    text = trim(adjustl(buf))
  end function

  ! `s` with the letters A-F of hexadecimal digits in lower case, as C's "%x" prints them.
  function lower(s) result(t)
    character(len=*), intent(in) :: s
    character(len=len(s)) :: t
    integer :: c

    t = s
    do c = 1, len(t)
      if (t(c:c) >= 'A' .and. t(c:c) <= 'F') t(c:c) = achar(iachar(t(c:c)) + 32)
    end do
  end function

end program heat2d
