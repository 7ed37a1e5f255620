// libFuzzer target for the key decoders (`make fuzz`): index keys of every kind, primary
// keys, row references, link keys and values, and object-ID URIs (the parser behind
// `managedObjectID(forURIRepresentation:)` and `ManagedObjectID`'s `Decodable` init).
//
// Every input must decode or give a typed error / nil: never a trap, never an over-read
// (AddressSanitizer watches). What decodes must survive re-encode -> decode, and where the
// encoding is canonical (everything but -0.0, NaN payloads and URLs), re-encode to the very
// bytes it came from.
// Built normally (swift build) it replays the files named on its command line instead.
import Foundation
@_spi(StorageInternals) import Strata

@_cdecl("LLVMFuzzerTestOneInput")
public func keyDecoderFuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    checkOneInput(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

func checkOneInput(_ bytes: UnsafeRawBufferPointer) {
    for kind in Codecs.IndexKind.all { checkIndexValues(bytes, kind: kind) }
    checkIndexKey(bytes)
    checkRowKeys(bytes)
    checkObjectIDURI(bytes)
}

func fail(_ message: String, _ bytes: UnsafeRawBufferPointer) -> Never {
    fatalError("\(message): input \(Array(bytes.prefix(600)))")
}

// MARK: Index values

typealias Codecs = StorageKeyCodecs

/// Decodes values of `kind` one after another, as a compound key would hold them.
func checkIndexValues(_ bytes: UnsafeRawBufferPointer, kind: Codecs.IndexKind) {
    var offset = 0
    for _ in 0..<16 {
        let start = offset
        let value: AttributeValue?
        do throws(Codecs.DecodingError) {
            value = try Codecs.decodeIndexValue(bytes, as: kind, at: &offset)
        } catch {
            guard offset == start else { fail("a failed \(kind) decode moved the offset", bytes) }
            guard (0...bytes.count).contains(error.offset) else { fail("\(kind) error outside the key: \(error)", bytes) }
            return
        }
        guard offset > start, offset <= bytes.count else { fail("\(kind) decode moved to \(offset) from \(start)", bytes) }
        expectRoundTrip(value, kind: kind, from: UnsafeRawBufferPointer(rebasing: bytes[start..<offset]), input: bytes)
        if offset == bytes.count { return }
    }
}

/// Re-encoding `value` gives an encoding that decodes to the same value, whole; for a
/// canonical encoding, the bytes it was read from.
func expectRoundTrip(_ value: AttributeValue?, kind: Codecs.IndexKind, from source: UnsafeRawBufferPointer, input: UnsafeRawBufferPointer) {
    guard let encoded = Codecs.encodeIndexValue(value, as: kind) else {
        fail("a decoded \(kind) value \(String(describing: value)) does not encode as \(kind)", input)
    }
    var offset = 0
    let decoded = encoded.withUnsafeBytes { buffer in
        Result { () throws(Codecs.DecodingError) in try Codecs.decodeIndexValue(buffer, as: kind, at: &offset) }
    }
    guard case .success(let again) = decoded else { fail("a re-encoded \(kind) value does not decode: \(decoded)", input) }
    guard offset == encoded.count else { fail("a re-encoded \(kind) value decodes from a part of itself", input) }
    guard Codecs.encodeIndexValue(again, as: kind) == encoded else {
        fail("\(kind): encode -> decode -> encode is not a fixed point", input)
    }
    if isCanonical(value) {
        guard again == value else { fail("\(kind): \(String(describing: value)) came back as \(String(describing: again))", input) }
        guard kind.description == "uri" || encoded.elementsEqual(source) else {
            fail("\(kind): \(String(describing: value)) re-encodes to other bytes", input)
        }
    }
}

/// Values whose encoding is the only one: not -0.0 (stored as 0.0), not NaN (one NaN is stored).
func isCanonical(_ value: AttributeValue?) -> Bool {
    switch value {
    case .double(let d): !d.isNaN && !(d == 0 && d.sign == .minus)
    case .date(let date):
        !date.timeIntervalSinceReferenceDate.isNaN
            && !(date.timeIntervalSinceReferenceDate == 0 && date.timeIntervalSinceReferenceDate.sign == .minus)
    default: true
    }
}

/// A whole `index:` key: an encoded value (cut to 503 bytes when long), then the primary key.
func checkIndexKey(_ key: UnsafeRawBufferPointer) {
    guard key.count > 8, key.count <= Codecs.maximumIndexKeyLength else { return }
    let part = UnsafeRawBufferPointer(rebasing: key[..<(key.count - 8)])
    let truncated = Codecs.isTruncatedIndexValue(part)
    guard let primaryKey = Codecs.decodePrimaryKey(UnsafeRawBufferPointer(rebasing: key[(key.count - 8)...])) else { return }
    for kind in Codecs.IndexKind.all {
        var offset = 0
        guard let value = try? Codecs.decodeIndexValue(part, as: kind, at: &offset), offset == part.count else { continue }
        guard !truncated else { fail("a whole \(kind) value counts as truncated", key) }
        guard let rebuilt = Codecs.indexKey(value, as: kind, primaryKey: primaryKey) else {
            fail("a decoded \(kind) index value has no key", key)
        }
        if isCanonical(value), kind.description != "uri", !rebuilt.elementsEqual(key) {
            fail("a \(kind) index key re-encodes to other bytes", key)
        }
    }
}

// MARK: Rows and links

func checkRowKeys(_ bytes: UnsafeRawBufferPointer) {
    if let key = Codecs.decodePrimaryKey(bytes) {
        guard bytes.count == 8, key != 0, Codecs.encodePrimaryKey(key)?.elementsEqual(bytes) == true else {
            fail("primary key \(key)", bytes)
        }
    } else if bytes.count == 8, bytes.contains(where: { $0 != 0 }) {
        fail("8 bytes not all zero refused as a primary key", bytes)
    }
    if let reference = Codecs.decodeRowReference(bytes) {
        guard reference.entityNumber != 0,
              Codecs.encodeRowReference(entityNumber: reference.entityNumber, primaryKey: reference.primaryKey)?.elementsEqual(bytes) == true
        else { fail("row reference \(reference)", bytes) }
    }
    if let destination = Codecs.linkDestination(inKey: bytes) {
        guard bytes.count == 20 else { fail("a link key of \(bytes.count) bytes", bytes) }
        if let owner = Codecs.decodeRowReference(UnsafeRawBufferPointer(rebasing: bytes[..<10])),
           Codecs.linkKey(owner: owner, destination: destination)?.elementsEqual(bytes) != true {
            fail("link key \(owner) -> \(destination) re-encodes to other bytes", bytes)
        }
    }
    let (position, isValid) = Codecs.linkPosition(inValue: bytes)
    switch (bytes.count, position, isValid) {
    case (0, nil, true): break
    case (8, let position?, true):
        guard Codecs.linkValue(position: position).elementsEqual(bytes) else { fail("link position \(position)", bytes) }
    case (let count, nil, false) where count != 0 && count != 8: break
    default: fail("link value of \(bytes.count) bytes read as \(String(describing: position)), valid \(isValid)", bytes)
    }
}

// MARK: Object-ID URIs

/// A coordinator with one entity and no store: temporary IDs of `Note` resolve, nothing else does.
final class Note: ManagedObject {
    @Attribute var title: String = ""
}

let coordinator: PersistentStoreCoordinator = {
    do {
        return PersistentStoreCoordinator(managedObjectModel: try ManagedObjectModel(types: [Note.self]))
    } catch {
        fatalError("the fuzzer's model is invalid: \(error)")
    }
}()

func checkObjectIDURI(_ bytes: UnsafeRawBufferPointer) {
    guard bytes.count <= 4096 else { return }
    let text = String(decoding: bytes, as: UTF8.self)
    let decoder = JSONDecoder()
    // Through Decodable: a JSON string holding the text.
    let json = (try? JSONEncoder().encode([text])) ?? Data("[]".utf8)
    let decoded: ManagedObjectID?
    do {
        decoded = try decoder.decode([ManagedObjectID].self, from: json).first
    } catch is DecodingError {
        decoded = nil
    } catch {
        fail("decoding an object ID threw \(type(of: error)), not a DecodingError: \(error)", bytes)
    }
    // The raw bytes as JSON: anything but an ID or a DecodingError is wrong.
    do {
        _ = try decoder.decode(ManagedObjectID.self, from: Data(bytes))
    } catch is DecodingError {
    } catch {
        fail("decoding raw bytes as an object ID threw \(type(of: error)), not a DecodingError", bytes)
    }
    guard let url = URL(string: text) else {
        if decoded != nil { fail("an ID decodes from text that is no URL", bytes) }
        return
    }
    let resolved = coordinator.managedObjectID(forURIRepresentation: url)
    guard let id = decoded else {
        if resolved != nil { fail("the coordinator resolves a URI that Decodable refuses", bytes) }
        return
    }
    // The ID's own URI parses back to it, through both doors, and prints the same again.
    let uri = id.uriRepresentation
    guard let again = try? decoder.decode(ManagedObjectID.self, from: JSONEncoder().encode(id)), again == id,
          again.uriRepresentation == uri, again.entityName == id.entityName,
          again.isTemporaryID == id.isTemporaryID, again.storeIdentifier == id.storeIdentifier
    else { fail("\(id) does not survive encode -> decode", bytes) }
    // No store is added: only temporary IDs of the model's entity resolve.
    let shouldResolve = id.isTemporaryID && id.entityName == "Note"
    guard (resolved != nil) == shouldResolve, resolved.map({ $0 == id }) ?? true else {
        fail("the coordinator resolves \(id) as \(String(describing: resolved))", bytes)
    }
}

#if !STRATA_FUZZING
/// Replays corpus files: `KeyDecoderFuzzer FILE...`; `KeyDecoderFuzzer --write-seeds DIR`
/// writes the seed corpus (real encodings) into DIR.
@main
enum ReplayKeyInputs {
    static func main() throws {
        var arguments = CommandLine.arguments.dropFirst()
        if arguments.first == "--write-seeds", let directory = arguments.dropFirst().first {
            for (name, bytes) in Seeds.all() {
                let data = Data(bytes)
                data.withUnsafeBytes { checkOneInput($0) }
                try data.write(to: URL(fileURLWithPath: directory).appendingPathComponent(name))
            }
            arguments = []
        }
        for path in arguments {
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            data.withUnsafeBytes { checkOneInput($0) }
        }
    }
}

/// The seed corpus: encodings made by the real encoders, by name.
enum Seeds {
    static func all() -> [(String, [UInt8])] {
        var seeds: [(String, [UInt8])] = []
        let kinds = Dictionary(uniqueKeysWithValues: Codecs.IndexKind.all.map { ($0.description, $0) })
        func index(_ name: String, _ value: AttributeValue?, _ kind: String) {
            seeds.append(("index-\(name)", Codecs.encodeIndexValue(value, as: kinds[kind]!)!))
        }
        let uuid = UUID(uuidString: "6F1E7B0C-2A9D-4E51-9C3B-0D8F7A6E5B41")!
        index("nil", nil, "integer")
        index("integer-zero", .integer(0), "integer")
        index("integer-min", .integer(.min), "integer")
        index("integer-max", .integer(.max), "integer")
        index("integer-minus-one", .integer(-1), "integer")
        index("double-pi", .double(3.141592653589793), "double")
        index("double-negative", .double(-1.5e-300), "double")
        index("double-infinity", .double(.infinity), "double")
        index("double-nan", .double(.nan), "double")
        index("float", .float(0.25), "double")
        index("boolean-false", .boolean(false), "boolean")
        index("boolean-true", .boolean(true), "boolean")
        index("date", .date(Date(timeIntervalSinceReferenceDate: 760_000_000.5)), "date")
        index("date-distant-past", .date(.distantPast), "date")
        index("uuid", .uuid(uuid), "uuid")
        index("string-empty", .string(""), "string")
        index("string-ascii", .string("inbox"), "string")
        index("string-nul", .string("a\u{0}b\u{0}"), "string")
        index("string-unicode", .string("Zürich 東京 🦊"), "string")
        index("data-escapes", .binaryData(Data([0x00, 0xFF, 0x00, 0x00, 0x01])), "binaryData")
        index("data-empty", .binaryData(Data()), "binaryData")
        index("uri", .uri(URL(string: "https://example.com/a?b=c#d")!), "uri")
        index("uri-file", .uri(URL(fileURLWithPath: "/tmp/x y")), "uri")
        // Compound keys: several values in a row.
        seeds.append(("index-compound", Codecs.encodeIndexValue(.integer(7), as: kinds["integer"]!)!
            + Codecs.encodeIndexValue(.string("x"), as: kinds["string"]!)! + Codecs.encodeIndexValue(nil, as: kinds["uuid"]!)!))
        // Whole index keys, a long value cut to fit among them.
        seeds.append(("indexkey-string", Codecs.indexKey(.string("c17"), as: kinds["string"]!, primaryKey: 42)!))
        seeds.append(("indexkey-integer", Codecs.indexKey(.integer(-5), as: kinds["integer"]!, primaryKey: 42)!))
        seeds.append(("indexkey-nil", Codecs.indexKey(nil, as: kinds["date"]!, primaryKey: 42)!))
        seeds.append(("indexkey-truncated", Codecs.indexKey(
            .string(String(repeating: "long ", count: 200)), as: kinds["string"]!, primaryKey: .max)!))
        // Rows and links.
        let owner = (entityNumber: UInt16(1), primaryKey: UInt64(1))
        let destination = (entityNumber: UInt16(3), primaryKey: UInt64(0x0102_0304_0506_0708))
        seeds.append(("primarykey", Codecs.encodePrimaryKey(1_000_000)!))
        seeds.append(("primarykey-zero", [UInt8](repeating: 0, count: 8)))
        seeds.append(("rowreference", Codecs.encodeRowReference(entityNumber: 3, primaryKey: destination.primaryKey)!))
        seeds.append(("linkkey", Codecs.linkKey(owner: owner, destination: destination)!))
        seeds.append(("linkvalue", Codecs.linkValue(position: 12)))
        // Object-ID URIs, good and bad.
        let store = uuid.uuidString
        for (name, text) in [
            ("uri-permanent", "x-strata://\(store)/Note/p42"),
            ("uri-temporary", "x-strata:///Note/t\(store)"),
            ("uri-lowercase-store", "x-strata://\(store.lowercased())/Note/p18446744073709551615"),
            ("uri-json", "\"x-strata:///Note/t\(store)\""),
            ("uri-key-zero", "x-strata://\(store)/Note/p0"),
            ("uri-leading-zero", "x-strata://\(store)/Note/p042"),
            ("uri-extra-part", "x-strata://\(store)/Note/p42/more"),
            ("uri-query", "x-strata://\(store)/Note/p42?x=1"),
            ("uri-wrong-scheme", "https://\(store)/Note/p42"),
            ("uri-unknown-entity", "x-strata:///Folder/t\(store)"),
            ("uri-percent", "x-strata:///N%C3%B6te/t\(store)"),
        ] {
            seeds.append((name, Array(text.utf8)))
        }
        return seeds
    }
}
#endif
