//! The C declarations of `native/fs/store.h`: the layout structs mirrored field by field
//! (the test `layout_matches_c` compares every size and offset with `cairn_store_layout()`),
//! constants and the functions.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_long, c_void};

pub const STORE_MAGIC: u64 = 0x3145_524f_544e_5243;
pub const STORE_VERSION: u32 = 1;
pub const PATH_MAX: usize = 256;
pub const MAX_NUMA: usize = 8;
pub const BUSY_SLOTS: usize = 8;
pub const SPILL_HEADER: u64 = 4096;
pub const CHUNK_NONE: u32 = u32::MAX;

pub const FILE_FREE: u32 = 0;
pub const FILE_REG: u32 = 1;
pub const FILE_DIR: u32 = 2;

pub const O_CREAT: i32 = 1;
pub const O_EXCL: i32 = 2;
pub const O_TRUNC: i32 = 4;

/// `struct cairn_store_header`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StoreHeader {
    pub magic: u64,
    pub version: u32,
    pub header_size: u32,
    pub segment_size: u64,
    pub chunk_size: u64,
    pub mem_chunks: u32,
    pub spill_chunks: u32,
    pub max_files: u32,
    pub numa_nodes: u32,
    pub files_offset: u64,
    pub link_offset: u64,
    pub free_offset: u64,
    pub data_offset: u64,
    pub spill_id: u64,
    pub creator_pid: i32,
    pub flags: u32,
    pub files_used: u64,
    pub numa_first: [u32; MAX_NUMA],
    pub numa_count: [u32; MAX_NUMA],
    pub numa_top: [u32; MAX_NUMA],
    pub spill_top: u32,
    pub repairs: u32,
    pub generation: u64,
    pub chunk_frees: u64,
    pub lock: libc::pthread_mutex_t,
    pub reserved: [u8; 56],
}

/// `struct cairn_store_file`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FileRecord {
    pub state: u32,
    pub mode: u32,
    pub size: u64,
    pub first_chunk: u32,
    pub last_chunk: u32,
    pub nchunks: u32,
    pub gen: u32,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub path_hash: u64,
    pub busy: [i32; BUSY_SLOTS],
    pub writes_started: u64,
    pub writes_done: u64,
    pub path: [c_char; PATH_MAX],
}

/// `struct cairn_chunk_meta`: where one chunk of a file is.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkMeta {
    /// First file byte in the chunk.
    pub file_offset: u64,
    /// File bytes in the chunk.
    pub length: u64,
    pub id: u32,
    /// 1: in the spill file.
    pub in_spill: u32,
    /// Byte offset in the segment (pool chunks) or in the spill file.
    pub offset: u64,
}

/// `struct cairn_store_fh`: a file's record index and generation.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileHandle {
    pub index: u32,
    pub gen: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct cairn_store_stat {
    pub type_: u32,
    pub mode: u32,
    pub size: u64,
    pub nchunks: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub writes_started: u64,
    pub writes_done: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct cairn_store_usage {
    pub chunk_size: u64,
    pub mem_chunks: u64,
    pub mem_free: u64,
    pub spill_chunks: u64,
    pub spill_free: u64,
    pub max_files: u64,
    pub files_used: u64,
    pub numa_nodes: u32,
    pub repairs: u32,
    pub per_process: u32,
    pub version: u32,
}

#[repr(C)]
pub struct cairn_store_config {
    pub name: *const c_char,
    pub size: u64,
    pub chunk: u64,
    pub max_files: u32,
    pub spill_path: *const c_char,
    pub spill_size: u64,
    pub per_process: c_int,
    pub create: c_int,
    pub populate: c_int,
}

/// The opaque process-local handle.
#[repr(C)]
pub struct cairn_store {
    _private: [u8; 0],
}

extern "C" {
    pub fn cairn_store_name(
        buf: *mut c_char,
        len: usize,
        uid: u32,
        job: *const c_char,
        node: c_long,
    ) -> c_int;
    pub fn cairn_store_open(
        cfg: *const cairn_store_config,
        out: *mut *mut cairn_store,
        err: *mut c_char,
        errlen: usize,
    ) -> c_int;
    pub fn cairn_store_close(s: *mut cairn_store);
    pub fn cairn_store_wipe(name: *const c_char, spill: *const c_char) -> c_int;
    pub fn cairn_store_base(s: *mut cairn_store) -> *mut c_void;
    pub fn cairn_store_header(s: *mut cairn_store) -> *const StoreHeader;
    pub fn cairn_store_normalize(input: *const c_char, out: *mut c_char, len: usize) -> c_int;
    pub fn cairn_store_open_file(
        s: *mut cairn_store,
        path: *const c_char,
        flags: c_int,
        mode: u32,
        fh: *mut FileHandle,
    ) -> c_int;
    pub fn cairn_store_pwrite(
        s: *mut cairn_store,
        fh: FileHandle,
        buf: *const c_void,
        len: usize,
        off: u64,
    ) -> isize;
    pub fn cairn_store_pread(
        s: *mut cairn_store,
        fh: FileHandle,
        buf: *mut c_void,
        len: usize,
        off: u64,
    ) -> isize;
    pub fn cairn_store_ftruncate(s: *mut cairn_store, fh: FileHandle, size: u64) -> c_int;
    pub fn cairn_store_fstat(
        s: *mut cairn_store,
        fh: FileHandle,
        st: *mut cairn_store_stat,
    ) -> c_int;
    pub fn cairn_store_sync(s: *mut cairn_store) -> c_int;
    pub fn cairn_store_stat(
        s: *mut cairn_store,
        path: *const c_char,
        st: *mut cairn_store_stat,
    ) -> c_int;
    pub fn cairn_store_unlink(s: *mut cairn_store, path: *const c_char) -> c_int;
    pub fn cairn_store_rename(s: *mut cairn_store, from: *const c_char, to: *const c_char)
        -> c_int;
    pub fn cairn_store_mkdir(s: *mut cairn_store, path: *const c_char, mode: u32) -> c_int;
    pub fn cairn_store_rmdir(s: *mut cairn_store, path: *const c_char) -> c_int;
    pub fn cairn_store_readdir(
        s: *mut cairn_store,
        dir: *const c_char,
        cookie: *mut u64,
        name: *mut c_char,
        len: usize,
        type_: *mut u32,
    ) -> c_int;
    pub fn cairn_store_chunks(
        s: *mut cairn_store,
        fh: FileHandle,
        out: *mut ChunkMeta,
        max: usize,
    ) -> isize;
    pub fn cairn_store_read_spill(
        s: *mut cairn_store,
        offset: u64,
        buf: *mut c_void,
        len: usize,
    ) -> isize;
    pub fn cairn_store_usage(s: *mut cairn_store, u: *mut cairn_store_usage) -> c_int;
    pub fn cairn_store_layout(out: *mut u64, max: usize) -> usize;
}
