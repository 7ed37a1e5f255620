internal import CLMDB
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Checks an existing `data.mdb` before LMDB maps it, reading with `pread` only.
///
/// LMDB trusts its file: it takes the page size from the meta page unchecked (a wrong one
/// sends it outside its map), and it reads pages through `mmap`, so a page past the end
/// of a truncated file is SIGBUS. What is checked here, so that such a file is refused
/// with a thrown error instead:
///
/// - both meta pages are meta pages (flags, magic `0xBEEFC0DE`: else ``LMDBError/invalid``)
///   of data version 1 (else ``LMDBError/versionMismatch``);
/// - the page size is a power of two from 512 to 32,768 bytes, the same in both, and the
///   file holds both meta pages (else ``LMDBError/corrupted``);
/// - the newest meta page's last page is at least 1 and its roots are data pages up to it;
/// - every page the newest meta page can reach is inside the file (else
///   ``LMDBError/corrupted``, "truncated").
///
/// The last check is cheap in the usual case: when the file holds every page up to the
/// newest meta page's last page, nothing can be missing. A healthy file may be shorter
/// (LMDB does not write a page that a transaction allocated and freed again, and measured
/// here 17 of 4,000 random commits left data.mdb up to 5 pages short of `me_last_pgno`),
/// so only then are the B-trees walked (main, free list and every named database; branch
/// and leaf pages, overflow runs), each page read with `pread`, to tell unwritten free
/// pages from a file cut short.
///
/// ``Environment/verifyPages()`` walks every tree, strictly, on request.
///
/// LMDB has no page checksums: damage inside a page that keeps its structure (a flipped
/// bit in a key or value) cannot be told from data, and is not looked for here.
enum DataFileCheck {
    /// The size of the page header and `MDB_meta` together (lmdb's `mdb.c`, x86-64).
    static let metaLength = 152
    /// `P_INVALID`: the root of an empty tree.
    static let noPage = UInt64.max
    /// `CURSOR_STACK`: LMDB's deepest tree.
    static let maximumDepth = 32

    /// Checks the data file in `directory`. Returns whether it holds an initialised
    /// environment: false for a missing file (unless `mustExist`) or an empty one, which
    /// LMDB initialises as a new environment (a crash between creating the file and
    /// writing its meta pages leaves one; nothing can have been committed to it).
    static func check(directory: String, mustExist: Bool) throws(LMDBError) -> Bool {
        let dataPath = directory + "/data.mdb"
        let fd = open(dataPath, O_RDONLY)
        guard fd >= 0 else {
            let error = errno
            if mustExist || error != ENOENT {
                throw LMDBError(code: error, message: "no readable data.mdb in \(directory): \(String(cString: strerror(error)))")
            }
            return false
        }
        defer { close(fd) }
        let file = try PagedFile(fd: fd, path: dataPath)
        if file.size == 0 {
            guard mustExist else { return false }
            throw LMDBError(code: MDB_INVALID, message: "\(dataPath) is empty: no store was ever written to it")
        }
        let (meta0, meta1) = try metaPages(of: file)
        // LMDB reads the meta page with the larger transaction id (mdb_env_pick_meta).
        let newest = meta0.transactionID < meta1.transactionID ? meta1 : meta0
        try newest.checkAsNewest(in: file)
        let pageSize = Int(meta0.pageSize)
        let wholePages = UInt64(file.size / pageSize)
        if newest.lastPage < wholePages { return true }
        var walk = PageWalk(file: file, pageSize: pageSize, pages: wholePages, strict: false)
        try walk.trees(of: newest)
        return true
    }

    /// Both meta pages of a non-empty file, checked.
    static func metaPages(of file: PagedFile) throws(LMDBError) -> (MetaPage, MetaPage) {
        let size = file.size
        let first = try file.read(at: 0, count: min(size, metaLength))
        guard first.count >= 24, first.uint32(at: 16) == MetaPage.magic else {
            throw LMDBError(code: MDB_INVALID, message: "\(file.path) is not an LMDB data file")
        }
        guard first.count == metaLength else {
            throw file.truncated("\(size) bytes, shorter than one meta page")
        }
        let meta0 = try MetaPage(first, number: 0, file: file)
        let pageSize = Int(meta0.pageSize)
        guard size >= 2 * pageSize else {
            throw file.truncated("\(size) bytes, shorter than its two meta pages of \(pageSize) bytes")
        }
        let meta1 = try MetaPage(try file.read(at: pageSize, count: metaLength), number: 1, file: file)
        guard meta1.pageSize == meta0.pageSize else {
            throw file.corrupted("its meta pages disagree on the page size (\(meta0.pageSize) and \(meta1.pageSize))")
        }
        return (meta0, meta1)
    }
}

extension Environment {
    /// Reads every page the current snapshot can reach, with `pread` (never through the
    /// memory map, so damage cannot crash it), and checks that each is shaped as LMDB
    /// writes it: in the file, holding its own page number, of the kind its parent says,
    /// with its nodes and values inside it, node flags its database allows, every leaf at
    /// the depth its database records, overflow runs inside the file, and no page reached
    /// twice. What LMDB's own reads trust without checking, so a store that passes can be
    /// read without LMDB leaving its pages.
    ///
    /// Takes time proportional to the size of the trees (not of the free pages): about a
    /// `pread` per page. Runs in a read transaction, so writers go on meanwhile.
    ///
    /// LMDB has no checksums: a changed byte inside a key or a value is not found here.
    ///
    /// - Throws: ``LMDBError/corrupted`` naming the first damaged page;
    ///   ``LMDBError/invalid`` when a meta page is not one.
    public func verifyPages() throws {
        let dataPath = path + "/data.mdb"
        let fd = open(dataPath, O_RDONLY)
        guard fd >= 0 else {
            throw LMDBError(code: errno, message: "cannot read \(dataPath): \(String(cString: strerror(errno)))")
        }
        defer { Glibc.close(fd) }  // the global close, not Environment.close(timeout:)
        // The snapshot's pages cannot be reused while its read transaction is open. The
        // meta page of that snapshot is the one holding its transaction id; a writer may
        // overwrite it meanwhile (two commits later), and then the walk starts over.
        for _ in 0..<8 {
            let verified = try read { txn throws -> Bool in
                let file = try PagedFile(fd: fd, path: dataPath)
                let (meta0, meta1) = try DataFileCheck.metaPages(of: file)
                let snapshot = UInt64(UInt(bitPattern: txn.id))
                guard let meta = [meta0, meta1].first(where: { $0.transactionID == snapshot }) else { return false }
                try meta.checkAsNewest(in: file)
                let pages = UInt64(file.size) / UInt64(meta.pageSize)
                var walk = PageWalk(file: file, pageSize: Int(meta.pageSize), pages: pages, strict: true)
                try walk.trees(of: meta)
                return true
            }
            if verified { return }
        }
        throw LMDBError(code: MDB_BAD_TXN, message: "the pages of \(path) could not be verified: every try met a meta page rewritten by new commits")
    }
}

/// One of the two meta pages, checked on its own.
struct MetaPage {
    /// `MDB_MAGIC`.
    static let magic: UInt32 = 0xBEEF_C0DE
    /// `P_META`.
    static let metaFlag: UInt16 = 0x08

    /// 0 or 1.
    let number: Int
    let pageSize: UInt32
    /// The free list's and the main database's records (`MDB_db`, 48 bytes each).
    let freeDatabase: DatabaseRecord
    let mainDatabase: DatabaseRecord
    let lastPage: UInt64
    let transactionID: UInt64

    /// Reads meta page `number` from its first ``DataFileCheck/metaLength`` bytes.
    init(_ bytes: [UInt8], number: Int, file: PagedFile) throws(LMDBError) {
        guard bytes.count == DataFileCheck.metaLength, bytes.uint16(at: 10) & Self.metaFlag != 0,
              bytes.uint32(at: 16) == Self.magic
        else {
            throw LMDBError(code: MDB_INVALID, message: "\(file.path) is not an LMDB data file (meta page \(number) is not one)")
        }
        let version = bytes.uint32(at: 20)
        guard version == 1 else {
            throw LMDBError(code: MDB_VERSION_MISMATCH, message: "\(file.path) has LMDB data version \(version), not 1")
        }
        pageSize = bytes.uint32(at: 40)
        guard pageSize >= 512, pageSize <= 32768, pageSize & (pageSize - 1) == 0 else {
            throw file.corrupted("meta page \(number) records a page size of \(pageSize) bytes")
        }
        freeDatabase = DatabaseRecord(bytes, at: 40)
        mainDatabase = DatabaseRecord(bytes, at: 88)
        lastPage = bytes.uint64(at: 136)
        transactionID = bytes.uint64(at: 144)
        self.number = number
    }

    /// Checks the last page and the roots of the meta page LMDB reads (the newest).
    ///
    /// Only of that one: when a meta-page write fails, LMDB writes the old transaction id
    /// and last page back over it but keeps the new roots (`mdb_env_write_meta`), so the
    /// older meta page may record roots past its last page. LMDB never reads it again.
    func checkAsNewest(in file: PagedFile) throws(LMDBError) {
        guard lastPage >= 1, lastPage < UInt64(Int.max) / UInt64(pageSize) else {
            throw file.corrupted("meta page \(number) records \(lastPage) as its last page")
        }
        for (root, name) in [(freeDatabase.root, "free list"), (mainDatabase.root, "main database")]
        where root != DataFileCheck.noPage && (root < 2 || root > lastPage) {
            throw file.corrupted("meta page \(number) records page \(root) as the root of the \(name), beyond its last page \(lastPage)")
        }
    }
}

/// An `MDB_db`: a database's flags, depth and root page.
struct DatabaseRecord {
    /// `MDB_DUPSORT`, `MDB_DUPFIXED`.
    static let sortedDuplicates: UInt16 = 0x04, fixedDuplicates: UInt16 = 0x10

    let flags: UInt16
    let depth: UInt16
    let root: UInt64

    /// The record at `offset` of `bytes` (48 bytes: pad, flags, depth, page counts, entries, root).
    init(_ bytes: [UInt8], at offset: Int) {
        flags = bytes.uint16(at: offset + 4)
        depth = bytes.uint16(at: offset + 6)
        root = bytes.uint64(at: offset + 40)
    }
}

/// The data file, read with `pread`.
struct PagedFile {
    let fd: Int32
    let path: String
    let size: Int

    /// The file open as `fd`, at its current size.
    init(fd: Int32, path: String) throws(LMDBError) {
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw LMDBError(code: errno, message: "cannot stat \(path): \(String(cString: strerror(errno)))")
        }
        self.fd = fd
        self.path = path
        size = Int(info.st_size)
    }

    /// `count` bytes from `offset` (fewer at the end of the file).
    func read(at offset: Int, count: Int) throws(LMDBError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let result = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, count - done, off_t(offset + done)) }
            if result < 0 {
                if errno == EINTR { continue }
                throw LMDBError(code: errno, message: "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            if result == 0 { break }
            done += result
        }
        return done == count ? bytes : Array(bytes[..<done])
    }

    /// ``LMDBError/corrupted``: `data.mdb is damaged: reason`.
    func corrupted(_ reason: String) -> LMDBError {
        LMDBError(code: MDB_CORRUPTED, message: "\(path) is damaged: \(reason)")
    }

    /// ``LMDBError/corrupted``: `data.mdb is truncated: reason`.
    func truncated(_ reason: String) -> LMDBError {
        LMDBError(code: MDB_CORRUPTED, message: "\(path) is truncated: \(reason)")
    }
}

/// A walk over LMDB B-trees read with `pread`, checking that every page it reaches is in
/// the file and shaped as LMDB writes it (`mdb.c`: `MDB_page`, `MDB_node`, `MDB_db`).
///
/// Not `strict`, it checks what it must to find its way (bounds, page kinds); `strict`,
/// also what LMDB's reads rely on without checking (node flags, branch sizes, leaf depths).
struct PageWalk {
    let file: PagedFile
    let pageSize: Int
    /// The whole pages in the file.
    let pages: UInt64
    let strict: Bool
    /// Pages already reached: a page reached twice means a cycle or a shared page.
    private var visited = Set<UInt64>()

    // Page flags and node flags (mdb.c).
    static let branch: UInt16 = 0x01, leaf: UInt16 = 0x02, overflow: UInt16 = 0x04, leaf2: UInt16 = 0x20
    static let bigData: UInt16 = 0x01, subData: UInt16 = 0x02, dupData: UInt16 = 0x04
    /// `PAGEHDRSZ` and `NODESIZE`.
    static let headerSize = 16, nodeHeaderSize = 8

    init(file: PagedFile, pageSize: Int, pages: UInt64, strict: Bool) {
        self.file = file
        self.pageSize = pageSize
        self.pages = pages
        self.strict = strict
    }

    /// One tree to walk: its record and what it is.
    private struct Tree {
        var record: DatabaseRecord
        var name: String
        /// The free list (LMDB allows it branch pages of one key) or the main database
        /// (whose leaves hold named databases).
        var isFreeList = false, isMain = false, isDuplicates = false
    }

    /// Walks the free list, the main database and every named database in it.
    mutating func trees(of meta: MetaPage) throws(LMDBError) {
        try tree(Tree(record: meta.freeDatabase, name: "the free list", isFreeList: true))
        try tree(Tree(record: meta.mainDatabase, name: "the main database", isMain: true))
    }

    private mutating func tree(_ tree: Tree) throws(LMDBError) {
        let name = tree.name
        let record = tree.record
        guard record.root != DataFileCheck.noPage else {
            if strict, record.depth != 0 { throw file.corrupted("\(name) is empty but records a depth of \(record.depth)") }
            return
        }
        if strict, record.depth == 0 || Int(record.depth) > DataFileCheck.maximumDepth {
            throw file.corrupted("\(name) records a depth of \(record.depth)")
        }
        let sortsDuplicates = record.flags & DatabaseRecord.sortedDuplicates != 0
        var stack: [(page: UInt64, depth: Int)] = [(record.root, 1)]
        var subtrees: [Tree] = []
        while let (number, depth) = stack.popLast() {
            guard depth <= DataFileCheck.maximumDepth else {
                throw file.corrupted("\(name) is deeper than \(DataFileCheck.maximumDepth) pages at page \(number)")
            }
            let page = try read(number, in: name)
            let flags = page.uint16(at: 10)
            let isBranch = flags == Self.branch
            guard isBranch || flags & ~Self.leaf2 == Self.leaf,
                  !strict || flags == Self.branch || flags == Self.leaf || (tree.isDuplicates && flags == Self.leaf | Self.leaf2)
            else {
                throw file.corrupted("page \(number) of \(name) is neither a branch nor a leaf page (flags \(flags))")
            }
            if strict, !isBranch, depth != Int(record.depth) {
                throw file.corrupted("leaf page \(number) of \(name) is at depth \(depth), not \(record.depth)")
            }
            if flags & Self.leaf2 != 0 { continue }
            let lower = Int(page.uint16(at: 12)), upper = Int(page.uint16(at: 14))
            guard lower >= Self.headerSize, lower <= upper, upper <= pageSize, (lower - Self.headerSize) % 2 == 0 else {
                throw file.corrupted("page \(number) of \(name) has free space from \(lower) to \(upper)")
            }
            let count = (lower - Self.headerSize) / 2
            // mdb_page_search_root asserts that a branch page (outside the free list) has two keys.
            if strict, isBranch, count < (tree.isFreeList ? 1 : 2) {
                throw file.corrupted("branch page \(number) of \(name) has \(count) keys")
            }
            for index in 0..<count {
                let node = Int(page.uint16(at: Self.headerSize + 2 * index))
                let place = "node \(index) of page \(number) of \(name)"
                guard node >= upper, node + Self.nodeHeaderSize <= pageSize else {
                    throw file.corrupted("\(place) is at \(node), outside the page's nodes")
                }
                let low = UInt64(page.uint16(at: node)), high = UInt64(page.uint16(at: node + 2))
                let nodeFlags = page.uint16(at: node + 4)
                let keyEnd = node + Self.nodeHeaderSize + Int(page.uint16(at: node + 6))
                guard keyEnd <= pageSize else { throw file.corrupted("the key of \(place) runs past the page") }
                if isBranch {
                    stack.append((low | high << 16 | UInt64(nodeFlags) << 32, depth + 1))
                    continue
                }
                if strict {
                    let allowed = tree.isMain ? Self.subData | Self.bigData
                        : sortsDuplicates ? Self.subData | Self.dupData | Self.bigData : Self.bigData
                    guard nodeFlags & ~allowed == 0, nodeFlags & Self.subData == 0 || tree.isMain || nodeFlags & Self.dupData != 0,
                          nodeFlags & Self.bigData == 0 || nodeFlags & (Self.subData | Self.dupData) == 0
                    else { throw file.corrupted("\(place) has flags \(nodeFlags), which its database does not allow") }
                }
                let dataSize = Int(low | high << 16)
                if nodeFlags & Self.bigData != 0 {
                    guard keyEnd + 8 <= pageSize else { throw file.corrupted("\(place) runs past the page") }
                    try overflowRun(at: page.uint64(at: keyEnd), holding: dataSize, in: name)
                    continue
                }
                guard keyEnd + dataSize <= pageSize else { throw file.corrupted("the value of \(place) runs past the page") }
                // A named database (F_SUBDATA) or a sorted-duplicates subtree holds an MDB_db.
                if nodeFlags & Self.subData != 0 {
                    guard dataSize == 48 else { throw file.corrupted("\(place) holds a database record of \(dataSize) bytes") }
                    let key = String(decoding: page[(node + Self.nodeHeaderSize)..<keyEnd], as: UTF8.self)
                    let subtree = DatabaseRecord(page, at: keyEnd)
                    guard subtree.root == DataFileCheck.noPage || subtree.root >= 2 else {
                        throw file.corrupted("\(place) records page \(subtree.root) as a root")
                    }
                    let duplicates = nodeFlags & Self.dupData != 0
                    subtrees.append(Tree(record: subtree, name: duplicates ? "duplicates in \(name)" : "database \(key)", isDuplicates: duplicates))
                }
            }
        }
        for subtree in subtrees { try self.tree(subtree) }
    }

    /// Checks that the overflow run at `start` is in the file and large enough for `size` bytes.
    private mutating func overflowRun(at start: UInt64, holding size: Int, in name: String) throws(LMDBError) {
        let header = try read(start, in: name)
        let count = UInt64(header.uint32(at: 12))
        let flags = header.uint16(at: 10)
        // OVPAGES: the header and the value, in whole pages.
        guard strict ? flags == Self.overflow : flags & Self.overflow != 0,
              count >= 1, count * UInt64(pageSize) >= UInt64(size + Self.headerSize)
        else {
            throw file.corrupted("page \(start) of \(name) is not an overflow run of \(size) bytes")
        }
        guard count <= pages, start <= pages - count else {
            throw file.truncated("\(file.size) bytes, but \(name) needs pages \(start) to \(start &+ count &- 1) of \(pageSize) bytes")
        }
    }

    /// Page `number`, which must be a data page inside the file, reached for the first time.
    private mutating func read(_ number: UInt64, in name: String) throws(LMDBError) -> [UInt8] {
        guard number >= 2 else { throw file.corrupted("\(name) refers to meta page \(number)") }
        guard number < pages else {
            throw file.truncated("\(file.size) bytes, but \(name) needs page \(number) of \(pageSize) bytes")
        }
        guard visited.insert(number).inserted else {
            throw file.corrupted("page \(number) is reached twice (in \(name))")
        }
        let page = try file.read(at: Int(number) * pageSize, count: pageSize)
        guard page.count == pageSize, page.uint64(at: 0) == number else {
            throw file.corrupted("page \(number) of \(name) does not hold its own page number")
        }
        return page
    }
}

extension [UInt8] {
    func uint16(at offset: Int) -> UInt16 { withUnsafeBytes { UInt16(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt16.self)) } }
    func uint32(at offset: Int) -> UInt32 { withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt32.self)) } }
    func uint64(at offset: Int) -> UInt64 { withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) } }
}
