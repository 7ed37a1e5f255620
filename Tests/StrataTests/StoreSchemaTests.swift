import Foundation
@testable import Strata
import StrataTesting
import Testing

@Suite("Store schema")
struct StoreSchemaTests {
    @Test func assignsStableNumbersSharedByInheritedProperties() throws {
        let model = try StoreFixtures.model()
        let schema = StoreSchema(assigningNumbersFor: model)
        // Every entity, abstract ones included, has its own number ≥ 1.
        let numbers = model.entities.compactMap { schema.entityNumber(of: $0.name) }
        #expect(numbers.count == model.entities.count)
        #expect(Set(numbers).count == numbers.count && numbers.allSatisfy { $0 >= 1 })
        for entity in model.entities {
            #expect(schema.entityNames[schema.entityNumber(of: entity.name)!] == entity.name)
        }
        // Inherited properties keep the number of the entity that declares them.
        let created = try #require(schema.fieldNumber(entity: "Item", property: "created"))
        #expect(schema.fieldNumber(entity: "Folder", property: "created") == created)
        #expect(schema.fieldNumber(entity: "Note", property: "created") == created)
        #expect(schema.fieldNumber(entity: "Checklist", property: "created") == created)
        let title = try #require(schema.fieldNumber(entity: "Note", property: "title"))
        #expect(schema.fieldNumber(entity: "Checklist", property: "title") == title)
        #expect(schema.fieldNumber(entity: "Checklist", property: "folder") == schema.fieldNumber(entity: "Note", property: "folder"))
        // Transient attributes and to-many relationships have no field.
        #expect(schema.fieldNumber(entity: "Note", property: "scratch") == nil)
        #expect(schema.fieldNumber(entity: "Note", property: "tags") == nil)
        #expect(schema.fieldNumber(entity: "Folder", property: "notes") == nil)
        // To-one relationships do.
        #expect(schema.fieldNumber(entity: "Attachment", property: "note") != nil)
        // Within an entity every field number is distinct.
        for entity in schema.entities.values {
            #expect(Set(entity.fields.values).count == entity.fields.count)
            #expect(entity.fields.values.allSatisfy { $0 >= 1 })
        }
        // Deterministic: the same model numbers the same way.
        #expect(StoreSchema(assigningNumbersFor: try StoreFixtures.model()) == schema)
        #expect(schema.problem(storing: model) == nil)
    }

    @Test func encodingRoundTripsAndIsStable() throws {
        let schema = StoreSchema(assigningNumbersFor: try StoreFixtures.model())
        let bytes = schema.encoded()
        #expect(bytes.first == StoreSchema.encodingVersion)
        let decoded = try bytes.withUnsafeBytes { buffer throws in try StoreSchema(decoding: buffer) }
        #expect(decoded == schema)
        #expect(decoded.encoded() == bytes)
    }

    @Test func decodingIsTotal() throws {
        let valid = StoreSchema(assigningNumbersFor: try StoreFixtures.model()).encoded()
        // Every truncation of a valid encoding is refused with a typed error.
        for length in 0..<valid.count {
            #expect(throws: MetadataDecodingError.self) {
                try Array(valid.prefix(length)).withUnsafeBytes { buffer throws in _ = try StoreSchema(decoding: buffer) }
            }
        }
        // Random bytes and single-byte mutations never trap.
        var random = SeededRandomNumberGenerator(seed: 20_240_601)
        for _ in 0..<2_000 {
            var bytes = valid
            switch Int.random(in: 0..<3, using: &random) {
            case 0:
                bytes = (0..<Int.random(in: 0..<64, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
                if !bytes.isEmpty { bytes[0] = 1 }
            case 1:
                bytes[Int.random(in: 0..<bytes.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
            default:
                bytes.insert(UInt8.random(in: 0...255, using: &random), at: Int.random(in: 0...bytes.count, using: &random))
            }
            _ = try? bytes.withUnsafeBytes { buffer throws in try StoreSchema(decoding: buffer) }
        }
    }

    @Test(arguments: [
        ([2, 0] as [UInt8], "unknown schema encoding version"),
        ([1, 1, 1, 65, 0, 0], "outside"),                            // entity number 0
        ([1, 1, 1, 65, 0x80, 0x80, 0x04, 0], "outside"),             // entity number 65536
        ([1, 2, 1, 65, 1, 0, 1, 66, 1, 0], "appears twice"),         // two entities numbered 1
        ([1, 1, 1, 65, 1, 2, 1, 97, 1, 1, 98, 1], "appears twice"),  // two fields numbered 1
        ([1, 1, 1, 65, 1, 0, 9], "trailing bytes"),
        ([1, 1, 2, 0xC3, 0x28, 1, 0], "not UTF-8"),
        ([1, 200, 1], "cut short"),
    ])
    func malformedSchemasAreRefusedWithAReason(bytes: [UInt8], reason: String) {
        let error = #expect(throws: MetadataDecodingError.self) {
            try bytes.withUnsafeBytes { buffer throws in _ = try StoreSchema(decoding: buffer) }
        }
        #expect(error?.reason.contains(reason) == true, "\(String(describing: error))")
    }

    @Test func reportsAModelItDoesNotNumber() throws {
        let schema = StoreSchema(assigningNumbersFor: try StoreFixtures.model())
        let problem = schema.problem(storing: try StoreFixtures.changedModel())
        #expect(problem?.contains(".extra") == true, "\(String(describing: problem))")
    }

    @Test func metadataDecodingChecksTheFormatFirst() throws {
        let metadata = StoreMetadata(
            identifier: UUID(), formatVersion: StoreLayout.formatVersion, modelVersionHash: "0123456789abcdef",
            createdAt: Date(timeIntervalSinceReferenceDate: 1_000), schema: StoreSchema(assigningNumbersFor: try StoreFixtures.model()))
        var entries = Dictionary(uniqueKeysWithValues: metadata.entries.map { ($0.key, $0.value) })
        #expect(try StoreMetadata.decode { entries[$0] } == metadata)

        entries[StoreMetadata.Key.formatVersion] = [0, 0, 0, UInt8(StoreLayout.formatVersion + 1)]
        entries[StoreMetadata.Key.schema] = [0xFF]  // a newer format may encode anything
        let newer = #expect(throws: MetadataDecodingError.self) { try StoreMetadata.decode { entries[$0] } }
        #expect(newer?.isNewerFormat == true)
        entries[StoreMetadata.Key.formatVersion] = [0, 0, 0, 1]
        let damaged = #expect(throws: MetadataDecodingError.self) { try StoreMetadata.decode { entries[$0] } }
        #expect(damaged?.isNewerFormat == false && damaged?.reason.contains("schema") == true)
        entries[StoreMetadata.Key.schema] = metadata.schema.encoded()
        entries[StoreMetadata.Key.identifier] = [1, 2, 3]
        #expect(throws: MetadataDecodingError.self) { try StoreMetadata.decode { entries[$0] } }
        entries[StoreMetadata.Key.identifier] = nil
        #expect(throws: MetadataDecodingError.self) { try StoreMetadata.decode { entries[$0] } }
    }
}
