import StrataLMDB

extension StoreFile {
    /// Checks that every page LMDB can reach is shaped as LMDB writes it (read with
    /// `pread`, see `Environment.verifyPages()`), then, in one read transaction, that
    /// every row decodes, that indexes and links agree with the rows, and that
    /// primary-key sequences are ahead of every key. Adds what it finds to `report`;
    /// reads only. Damaged pages are reported and end the check of this store: reading
    /// them through LMDB could crash.
    func checkIntegrity(into report: inout IntegrityReport) throws {
        do {
            try environment.verifyPages()
        } catch let error as LMDBError where error == .corrupted || error == .invalid {
            if report.problems.count < IntegrityReport.problemLimit {
                report.problems.append("the store's pages are damaged: \(error.message)")
            } else {
                report.problemsOmitted += 1
            }
            return
        }
        try read { reader in
            var checker = IntegrityChecker(store: self, report: report)
            try checker.run(reader)
            report = checker.report
        }
    }
}

/// One integrity pass over a store (``StoreFile/checkIntegrity(into:)``).
private struct IntegrityChecker {
    let store: StoreFile
    var report: IntegrityReport
    /// Index entries each index database must hold, by database name.
    private var expectedIndexEntries: [String: Int] = [:]

    init(store: StoreFile, report: IntegrityReport) {
        self.store = store
        self.report = report
    }

    private var concrete: [EntityStorage] {
        store.entities.values.filter { $0.rows != nil }.sorted { $0.name < $1.name }
    }

    mutating func run(_ reader: borrowing StoreReader<ReadTransaction>) throws {
        let txn = reader.transaction
        for storage in concrete {
            try checkRows(of: storage, txn)
        }
        for storage in concrete {
            for attribute in storage.attributes {
                guard let index = attribute.index else { continue }
                let name = StoreLayout.indexDatabase(entity: storage.name, attribute: attribute.description.name)
                let entries = try txn.pointee.count(in: index)
                report.indexEntries += entries
                let expected = expectedIndexEntries[name, default: 0]
                if entries != expected {
                    problem("\(name) holds \(entries) entries for \(expected) rows: \(entries > expected ? "entries without a row" : "rows without an entry")")
                }
            }
            for relationship in storage.relationships {
                guard let links = relationship.links else { continue }
                try checkLinks(links, of: relationship, owner: storage, txn)
            }
        }
    }

    private mutating func problem(_ text: String) {
        if report.problems.count < IntegrityReport.problemLimit {
            report.problems.append(text)
        } else {
            report.problemsOmitted += 1
        }
    }

    /// Every row decodes and has its index entries; its foreign keys point at rows that
    /// point back (one-to-one) or list it (many-to-one); its key is under the sequence.
    private mutating func checkRows(of storage: EntityStorage, _ txn: UnsafePointer<ReadTransaction>) throws {
        guard let rows = storage.rows else { return }
        var largest: UInt64 = 0
        var checkedRows = 0
        var rowProblems: [String] = []
        var indexCounts: [String: Int] = [:]
        try txn.pointee.scan(rows) { keyBytes, value in
            checkedRows += 1
            guard let key = PrimaryKey(encoded: keyBytes) else {
                rowProblems.append("rows:\(storage.name) has a key of \(keyBytes.count) bytes, not an 8-byte primary key")
                return .continue
            }
            largest = max(largest, key.rawValue)
            let record: Record
            do throws(RecordDecodingError) {
                record = try RecordCodec.decode(value)
            } catch {
                rowProblems.append("\(storage.name) \(key) does not decode: \(error.reason)")
                return .continue
            }
            do {
                _ = try store.snapshot(of: record, storage: storage, key: key)
            } catch {
                rowProblems.append("\(storage.name) \(key): \(error)")
            }
            for attribute in storage.attributes {
                guard let index = attribute.index, let kind = attribute.indexKind, let field = attribute.field,
                      let entry = IndexLayout.key(record.fields[field], kind: kind, primaryKey: key)
                else { continue }
                indexCounts[StoreLayout.indexDatabase(entity: storage.name, attribute: attribute.description.name), default: 0] += 1
                if try !txn.pointee.contains(key: entry, in: index) {
                    rowProblems.append("\(storage.name) \(key) has no entry in the index of \(attribute.description.name)")
                }
            }
            let reference = RowReference(entityNumber: storage.number, primaryKey: key)
            for relationship in storage.relationships {
                guard let field = relationship.field, let value = record.fields[field] else { continue }
                if let trouble = try foreignKeyProblem(value, of: relationship, from: reference, storage: storage, txn) {
                    rowProblems.append("\(storage.name) \(key).\(relationship.description.name): \(trouble)")
                }
            }
            return .continue
        }
        report.rows += checkedRows
        for (name, count) in indexCounts { expectedIndexEntries[name, default: 0] += count }
        for text in rowProblems { problem(text) }
        let sequenceKey = Array(StoreMetadata.Key.sequence(entity: storage.name).utf8)
        let sequence = try txn.pointee.withValue(forKey: sequenceKey, in: store.metadataDatabase) { bytes -> UInt64? in
            guard let bytes else { return nil }
            return try? StoreMetadata.decodeUInt64(bytes, what: "sequence")
        }
        if largest > 0, (sequence ?? 0) < largest {
            problem("the primary-key sequence of \(storage.name) is \(sequence.map(String.init) ?? "missing or damaged"), below its largest key p\(largest): a new row could reuse a key")
        }
    }

    /// What is wrong with the foreign key `value` of `relationship` in row `owner`, or nil.
    private func foreignKeyProblem(
        _ value: AttributeValue, of relationship: StoredRelationship, from owner: RowReference,
        storage: EntityStorage, _ txn: UnsafePointer<ReadTransaction>
    ) throws -> String? {
        guard let destination = value.foreignKey,
              let target = store.entityStorage(numbered: destination.entityNumber), let targetRows = target.rows
        else { return "the foreign key is not a reference to a concrete entity" }
        let inverseName = relationship.description.inverseName
        guard let inverseSlot = target.relationshipSlot(named: inverseName) else {
            return try txn.pointee.contains(key: destination.primaryKey.encoded, in: targetRows)
                ? nil : "points at \(target.name) \(destination.primaryKey), which does not exist"
        }
        let inverse = target.relationships[inverseSlot]
        if let links = inverse.links {
            // Many-to-one: the destination lists this row among its links.
            guard try txn.pointee.contains(key: LinkLayout.key(owner: destination, destination: owner), in: links) else {
                return "\(target.name) \(destination.primaryKey) does not list it in \(inverseName)"
            }
            return try txn.pointee.contains(key: destination.primaryKey.encoded, in: targetRows)
                ? nil : "points at \(target.name) \(destination.primaryKey), which does not exist"
        }
        // One-to-one: the destination's foreign key points back.
        guard let field = inverse.field,
              let back = try txn.pointee.withValue(forKey: destination.primaryKey.encoded, in: targetRows, { bytes -> RowReference?? in
                  guard let bytes else { return .some(nil) }
                  guard let record = try? RecordCodec.decode(bytes) else { return nil }
                  return .some(record.fields[field]?.foreignKey)
              })
        else { return nil }  // an undecodable destination is reported with its own row
        guard let back else { return "points at \(target.name) \(destination.primaryKey), which does not exist or does not point back" }
        return back == owner ? nil : "\(target.name) \(destination.primaryKey) points back at \(back), not at it"
    }

    /// Every link joins two existing rows, and the other side agrees: the destination's
    /// foreign key names the owner (one-to-many) or its own links hold the mirror link
    /// (many-to-many).
    private mutating func checkLinks(
        _ links: Database, of relationship: StoredRelationship, owner storage: EntityStorage,
        _ txn: UnsafePointer<ReadTransaction>
    ) throws {
        let name = StoreLayout.linksDatabase(entity: storage.name, relationship: relationship.description.name)
        var linkProblems: [String] = []
        var count = 0
        try txn.pointee.scan(links) { key, value in
            count += 1
            guard key.count == 2 * RowReference.byteCount,
                  let owner = RowReference(encoded: UnsafeRawBufferPointer(rebasing: key[..<RowReference.byteCount])),
                  let destination = LinkLayout.destination(inKey: key), LinkLayout.position(inValue: value).isValid
            else {
                linkProblems.append("\(name) holds a malformed link (key of \(key.count) bytes, value of \(value.count))")
                return .continue
            }
            guard owner.entityNumber == storage.number,
                  try txn.pointee.contains(key: owner.primaryKey.encoded, in: storage.rows!)
            else {
                linkProblems.append("\(name): a link from \(owner), which is not a row of \(storage.name)")
                return .continue
            }
            guard let target = store.entityStorage(numbered: destination.entityNumber), let targetRows = target.rows,
                  try txn.pointee.contains(key: destination.primaryKey.encoded, in: targetRows)
            else {
                linkProblems.append("\(name): \(storage.name) \(owner.primaryKey) links to \(destination), which does not exist")
                return .continue
            }
            let inverseName = relationship.description.inverseName
            guard let inverseSlot = target.relationshipSlot(named: inverseName) else { return .continue }
            let inverse = target.relationships[inverseSlot]
            if let mirror = inverse.links {
                if try !txn.pointee.contains(key: LinkLayout.key(owner: destination, destination: owner), in: mirror) {
                    linkProblems.append("\(name): \(storage.name) \(owner.primaryKey) links to \(target.name) \(destination.primaryKey), which does not link back")
                }
            } else if let field = inverse.field {
                let back = try txn.pointee.withValue(forKey: destination.primaryKey.encoded, in: targetRows) { bytes -> RowReference? in
                    guard let bytes, let record = try? RecordCodec.decode(bytes) else { return owner }  // reported with the row
                    return record.fields[field]?.foreignKey
                }
                if back != owner {
                    linkProblems.append("\(name): \(storage.name) \(owner.primaryKey) lists \(target.name) \(destination.primaryKey), whose \(inverseName) is \(back.map { "\($0)" } ?? "nil")")
                }
            }
            return .continue
        }
        report.links += count
        for text in linkProblems { problem(text) }
    }
}
