! fti_mod.f90: FTI's Fortran module (USE FTI), implemented by Cairn over this library's C API
! (fti.h). The routines are FTI's, with the error code last: CALL FTI_Init(file, comm, err)
! (comm becomes FTI_COMM_WORLD), CALL FTI_Protect(id, data, err) for a scalar or an array of
! any rank of the intrinsic types, CALL FTI_Checkpoint(id, level, err), CALL FTI_Status(s),
! and so on. A protected variable must stay where it is (a POINTER, an ALLOCATABLE TARGET or
! a TARGET that is not reallocated) and be contiguous; a discontiguous one is FTI_NSCS.
! docs/migrate-fti.md describes what each call does.
module FTI
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int8, int16, int32, int64, real32, real64, real128
  implicit none
  private

  integer, parameter, public :: FTI_SCES = 0, FTI_NSCS = -1, FTI_NREC = -2, FTI_DONE = 1

  public :: FTI_Init, FTI_Status, FTI_InitType, FTI_Protect, FTI_Protect_Ptr, FTI_Checkpoint, &
            FTI_Recover, FTI_Snapshot, FTI_Finalize, FTI_GetStoredSize, FTI_RecoverVarInit, &
            FTI_RecoverVar, FTI_RecoverVarFinalize, FTI_InitICP, FTI_AddVarICP, &
            FTI_FinalizeICP, FTI_setIDFromString, FTI_getIDFromString, &
            FTI_InitCompositeType, FTI_AddScalarField, FTI_AddVectorField

  !> FTI's handles of the intrinsic types, for FTI_Protect_Ptr and composite types' fields;
  !! set by FTI_Init, as in FTI.
  integer, public :: FTI_CHARACTER1, FTI_INTEGER1, FTI_INTEGER2, FTI_INTEGER4, FTI_INTEGER8, &
                     FTI_LOGICAL1, FTI_LOGICAL2, FTI_LOGICAL4, FTI_LOGICAL8, FTI_REAL4, &
                     FTI_REAL8, FTI_REAL16, FTI_COMPLEX4, FTI_COMPLEX8, FTI_COMPLEX16

  !> FTI_InitType(size) and FTI_InitCompositeType(name, size): size a default integer or
  !! integer(c_size_t), as sizeof gives it.
  interface FTI_InitType
    module procedure init_type, init_type_sized
  end interface
  interface FTI_InitCompositeType
    module procedure init_composite, init_composite_sized
  end interface

  ! FTI's basic C type handles (fti.h), by the C type each Fortran kind is.
  integer, parameter :: T_CHAR = 0, T_SHRT = 1, T_INTG = 2, T_LONG = 3, T_SFLT = 8, T_DBLE = 9

  !> FTI_Protect(id, data, err): data a scalar or array of any rank.
  interface FTI_Protect
    module procedure protect_i1, protect_i2, protect_i4, protect_i8, protect_r4, protect_r8, &
                     protect_r16, protect_c4, protect_c8, protect_c16, protect_l1, protect_l2, &
                     protect_l4, protect_l8, protect_ch, FTI_Protect_Ptr
  end interface

  interface
    integer(c_int) function c_init(file, comm) bind(c, name='cairn_ftif_init')
      import :: c_int, c_char
      character(kind=c_char), intent(in) :: file(*)
      integer(c_int), intent(inout) :: comm
    end function
    integer(c_int) function c_status() bind(c, name='FTI_Status')
      import :: c_int
    end function
    integer(c_int) function c_init_type(size) bind(c, name='cairn_ftif_init_type')
      import :: c_int
      integer(c_int), value :: size
    end function
    integer(c_int) function c_protect(id, ptr, count, tid) bind(c, name='FTI_Protect')
      import :: c_int, c_ptr, c_int64_t
      integer(c_int), value :: id, tid
      type(c_ptr), value :: ptr
      integer(c_int64_t), value :: count
    end function
    integer(c_int) function c_checkpoint(id, level) bind(c, name='FTI_Checkpoint')
      import :: c_int
      integer(c_int), value :: id, level
    end function
    integer(c_int) function c_void_call(which) bind(c, name='cairn_ftif_call')
      import :: c_int
      integer(c_int), value :: which
    end function
    integer(c_int64_t) function c_stored_size(id) bind(c, name='FTI_GetStoredSize')
      import :: c_int, c_int64_t
      integer(c_int), value :: id
    end function
    integer(c_int) function c_recover_var(id) bind(c, name='FTI_RecoverVar')
      import :: c_int
      integer(c_int), value :: id
    end function
    integer(c_int) function c_init_icp(id, level, activate) bind(c, name='cairn_ftif_init_icp')
      import :: c_int
      integer(c_int), value :: id, level, activate
    end function
    integer(c_int) function c_add_var_icp(id) bind(c, name='FTI_AddVarICP')
      import :: c_int
      integer(c_int), value :: id
    end function
    integer(c_int) function c_set_id(name) bind(c, name='FTI_setIDFromString')
      import :: c_int, c_char
      character(kind=c_char), intent(in) :: name(*)
    end function
    integer(c_int) function c_get_id(name) bind(c, name='FTI_getIDFromString')
      import :: c_int, c_char
      character(kind=c_char), intent(in) :: name(*)
    end function
    integer(c_int) function c_init_composite(name, size, h5g) bind(c, name='FTI_InitCompositeType')
      import :: c_int, c_char, c_size_t, c_ptr
      character(kind=c_char), intent(in) :: name(*)
      integer(c_size_t), value :: size
      type(c_ptr), value :: h5g
    end function
    integer(c_int) function c_add_scalar(tid, name, fid, offset) bind(c, name='FTI_AddScalarField')
      import :: c_int, c_char, c_int64_t
      integer(c_int), value :: tid, fid
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), value :: offset
    end function
    integer(c_int) function c_add_vector(tid, name, fid, offset, ndims, dims) &
        bind(c, name='FTI_AddVectorField')
      import :: c_int, c_char, c_int64_t
      integer(c_int), value :: tid, fid, ndims
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), value :: offset
      integer(c_int64_t), intent(in) :: dims(*)
    end function
  end interface

  ! The argument-less calls, by number (cairn_ftif_call).
  integer(c_int), parameter :: RECOVER = 0, SNAPSHOT = 1, FINALIZE = 2, RV_INIT = 3, &
                               RV_FINALIZE = 4, FINALIZE_ICP = 5

contains

  ! A Fortran string as a NUL-terminated C string, trailing blanks dropped.
  pure function c_string(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=len_trim(s) + 1) :: c
    c = trim(s) // c_null_char
  end function

  subroutine FTI_Init(config_file, global_comm, err)
    character(len=*), intent(in) :: config_file
    integer, intent(inout) :: global_comm
    integer, intent(out) :: err
    integer(c_int) :: comm
    comm = int(global_comm, c_int)
    err = int(c_init(c_string(config_file), comm))
    global_comm = int(comm)
    if (err == FTI_SCES .or. err == FTI_NREC) call init_handles()
  end subroutine

  ! The handles of the intrinsic types: the C types of the same size where there is one.
  subroutine init_handles()
    FTI_CHARACTER1 = T_CHAR
    FTI_INTEGER1 = T_CHAR
    FTI_INTEGER2 = T_SHRT
    FTI_INTEGER4 = T_INTG
    FTI_INTEGER8 = T_LONG
    FTI_LOGICAL1 = T_CHAR
    FTI_LOGICAL2 = T_SHRT
    FTI_LOGICAL4 = T_INTG
    FTI_LOGICAL8 = T_LONG
    FTI_REAL4 = T_SFLT
    FTI_REAL8 = T_DBLE
    FTI_REAL16 = int(c_init_type(16_c_int))
    FTI_COMPLEX4 = int(c_init_type(8_c_int))
    FTI_COMPLEX8 = int(c_init_type(16_c_int))
    FTI_COMPLEX16 = int(c_init_type(32_c_int))
  end subroutine

  subroutine FTI_Status(status)
    integer, intent(out) :: status
    status = int(c_status())
  end subroutine

  !> A type of size bytes, for FTI_Protect_Ptr.
  integer function init_type(size)
    integer, intent(in) :: size
    init_type = int(c_init_type(int(size, c_int)))
  end function

  integer function init_type_sized(size)
    integer(c_size_t), intent(in) :: size
    init_type_sized = int(c_init_type(int(size, c_int)))
  end function

  !> A composite type of size bytes named name; its fields are described with
  !! FTI_AddScalarField and FTI_AddVectorField.
  integer function init_composite(name, size)
    character(len=*), intent(in) :: name
    integer, intent(in) :: size
    init_composite = init_composite_sized(name, int(size, c_size_t))
  end function

  integer function init_composite_sized(name, size)
    character(len=*), intent(in) :: name
    integer(c_size_t), intent(in) :: size
    init_composite_sized = int(c_init_composite(c_string(name), size, c_null_ptr))
  end function

  !> Field name of type field_tid at byte offset of the composite type complex_tid.
  integer function FTI_AddScalarField(complex_tid, name, field_tid, offset)
    integer, intent(in) :: complex_tid, field_tid
    character(len=*), intent(in) :: name
    integer(c_size_t), intent(in) :: offset
    FTI_AddScalarField = int(c_add_scalar(int(complex_tid, c_int), c_string(name), &
                                          int(field_tid, c_int), int(offset, c_int64_t)))
  end function

  !> An array field of ndims dimensions of dim_length(1:ndims) elements.
  integer function FTI_AddVectorField(complex_tid, name, field_tid, offset, ndims, dim_length)
    integer, intent(in) :: complex_tid, field_tid, ndims
    character(len=*), intent(in) :: name
    integer(c_size_t), intent(in) :: offset
    integer, intent(in) :: dim_length(*)
    FTI_AddVectorField = int(c_add_vector(int(complex_tid, c_int), c_string(name), &
                                          int(field_tid, c_int), int(offset, c_int64_t), &
                                          int(ndims, c_int), &
                                          int(dim_length(1:max(ndims, 0)), c_int64_t)))
  end function

  !> Protect count elements of type tid at ptr, as FTI_Protect does in C.
  subroutine FTI_Protect_Ptr(id, ptr, count, tid, err)
    integer, intent(in) :: id, count, tid
    type(c_ptr), intent(in) :: ptr
    integer, intent(out) :: err
    err = int(c_protect(int(id, c_int), ptr, int(count, c_int64_t), int(tid, c_int)))
  end subroutine

  subroutine protect_any(id, a, tid, per_element, err)
    integer, intent(in) :: id, tid, per_element
    type(*), intent(inout), target :: a(..)
    integer, intent(out) :: err
    if (.not. is_contiguous(a)) then
      write (*, '(a,i0,a)') 'fti: FTI_Protect(id ', id, '): the array is not contiguous'
      err = FTI_NSCS
      return
    end if
    if (size(a) == 0) then
      err = int(c_protect(int(id, c_int), c_null_ptr, 0_c_int64_t, int(tid, c_int)))
    else
      err = int(c_protect(int(id, c_int), c_loc(a), size(a, kind=c_int64_t) * per_element, &
                          int(tid, c_int)))
    end if
  end subroutine

  subroutine protect_i1(id, a, err)
    integer, intent(in) :: id
    integer(int8), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_CHAR, 1, err)
  end subroutine

  subroutine protect_i2(id, a, err)
    integer, intent(in) :: id
    integer(int16), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_SHRT, 1, err)
  end subroutine

  subroutine protect_i4(id, a, err)
    integer, intent(in) :: id
    integer(int32), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_INTG, 1, err)
  end subroutine

  subroutine protect_i8(id, a, err)
    integer, intent(in) :: id
    integer(int64), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_LONG, 1, err)
  end subroutine

  subroutine protect_r4(id, a, err)
    integer, intent(in) :: id
    real(real32), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_SFLT, 1, err)
  end subroutine

  subroutine protect_r8(id, a, err)
    integer, intent(in) :: id
    real(real64), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_DBLE, 1, err)
  end subroutine

  ! A complex number is its two parts side by side, as C lays out float/double _Complex.
  subroutine protect_c4(id, a, err)
    integer, intent(in) :: id
    complex(real32), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_SFLT, 2, err)
  end subroutine

  subroutine protect_c8(id, a, err)
    integer, intent(in) :: id
    complex(real64), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_DBLE, 2, err)
  end subroutine

  ! Quadruple precision, LOGICAL and CHARACTER have no C element type: stored as their bytes.
  subroutine protect_r16(id, a, err)
    integer, intent(in) :: id
    real(real128), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_CHAR, storage_size(1.0_real128) / 8, err)
  end subroutine

  subroutine protect_c16(id, a, err)
    integer, intent(in) :: id
    complex(real128), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_CHAR, 2 * storage_size(1.0_real128) / 8, err)
  end subroutine

  subroutine protect_l1(id, a, err)
    integer, intent(in) :: id
    logical(int8), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_CHAR, 1, err)
  end subroutine

  subroutine protect_l2(id, a, err)
    integer, intent(in) :: id
    logical(int16), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_SHRT, 1, err)
  end subroutine

  subroutine protect_l4(id, a, err)
    integer, intent(in) :: id
    logical(int32), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_INTG, 1, err)
  end subroutine

  subroutine protect_l8(id, a, err)
    integer, intent(in) :: id
    logical(int64), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_LONG, 1, err)
  end subroutine

  subroutine protect_ch(id, a, err)
    integer, intent(in) :: id
    character(len=*), intent(inout), target :: a(..)
    integer, intent(out) :: err
    call protect_any(id, a, T_CHAR, len(a), err)
  end subroutine

  subroutine FTI_Checkpoint(id, level, err)
    integer, intent(in) :: id, level
    integer, intent(out) :: err
    err = int(c_checkpoint(int(id, c_int), int(level, c_int)))
  end subroutine

  subroutine FTI_Recover(err)
    integer, intent(out) :: err
    err = int(c_void_call(RECOVER))
  end subroutine

  subroutine FTI_Snapshot(err)
    integer, intent(out) :: err
    err = int(c_void_call(SNAPSHOT))
  end subroutine

  subroutine FTI_Finalize(err)
    integer, intent(out) :: err
    err = int(c_void_call(FINALIZE))
  end subroutine

  subroutine FTI_GetStoredSize(id, size)
    integer, intent(in) :: id
    integer(int64), intent(out) :: size
    size = int(c_stored_size(int(id, c_int)), int64)
  end subroutine

  subroutine FTI_RecoverVarInit(err)
    integer, intent(out) :: err
    err = int(c_void_call(RV_INIT))
  end subroutine

  subroutine FTI_RecoverVar(id, err)
    integer, intent(in) :: id
    integer, intent(out) :: err
    err = int(c_recover_var(int(id, c_int)))
  end subroutine

  subroutine FTI_RecoverVarFinalize(err)
    integer, intent(out) :: err
    err = int(c_void_call(RV_FINALIZE))
  end subroutine

  subroutine FTI_InitICP(id, level, activate, err)
    integer, intent(in) :: id, level
    logical, intent(in) :: activate
    integer, intent(out) :: err
    err = int(c_init_icp(int(id, c_int), int(level, c_int), merge(1_c_int, 0_c_int, activate)))
  end subroutine

  subroutine FTI_AddVarICP(id, err)
    integer, intent(in) :: id
    integer, intent(out) :: err
    err = int(c_add_var_icp(int(id, c_int)))
  end subroutine

  subroutine FTI_FinalizeICP(err)
    integer, intent(out) :: err
    err = int(c_void_call(FINALIZE_ICP))
  end subroutine

  subroutine FTI_setIDFromString(name, id)
    character(len=*), intent(in) :: name
    integer, intent(out) :: id
    id = int(c_set_id(c_string(name)))
  end subroutine

  subroutine FTI_getIDFromString(name, id)
    character(len=*), intent(in) :: name
    integer, intent(out) :: id
    id = int(c_get_id(c_string(name)))
  end subroutine
end module FTI
