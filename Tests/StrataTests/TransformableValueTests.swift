import Foundation
@testable import Strata
import StrataTesting
import Testing

/// A transformable value is stored only when it can be read back (issue 19): a value its
/// own `init(from:)` refuses, a value `JSONEncoder` cannot encode, and bytes that are not
/// the type are refused when they are set, not found at read-back (where they would make
/// the row unreadable for good).
@Suite("Transformable values that cannot be read back")
struct TransformableValueTests {
    /// A level its decoder checks (0...10) while its encoder writes any value.
    struct Level: TransformableAttribute, Hashable {
        var value: Int

        init(_ value: Int) { self.value = value }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            value = try container.decode(Int.self, forKey: .value)
            guard (0...10).contains(value) else {
                throw DecodingError.dataCorruptedError(forKey: .value, in: container, debugDescription: "\(value) is not a level")
            }
        }
    }

    /// A position whose `Double` may be infinite, which `JSONEncoder` refuses.
    struct Position: TransformableAttribute, Hashable {
        var x: Double
    }

    final class Gauge: ManagedObject {
        @Attribute var level: Level = Level(1)
        @Attribute var position: Position?
        @Attribute var name: String = ""
    }

    static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel(types: [Gauge.self])
        } catch {
            preconditionFailure("the gauge model is invalid: \(error)")
        }
    }()

    static func coordinator(in directory: URL) async throws -> PersistentStoreCoordinator {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try await coordinator.addPersistentStore(type: .lmdb, at: directory.appendingPathComponent("Gauges.strata"))
        return coordinator
    }

    static func isTypeMismatch(_ error: (any Error)?, key: String) -> Bool {
        guard let error = error as? StrataError, error.code == .typeMismatch, error.entityName == "Gauge" else { return false }
        return error.key == key
    }

    @Test("setValue refuses a value that does not decode from its own encoding, a value that cannot be encoded, and bytes that are not the type; nothing changes")
    func setValueRefuses() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await Self.coordinator(in: directory.url)
        try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let gauge = Gauge()
            try context.insert(gauge)
            try context.save()
            let refused: [(String, Any)] = [
                ("level", Level(11)),
                ("position", Position(x: .infinity)),
                ("level", AttributeValue.transformable(Data("not json".utf8))),
                ("level", AttributeValue.transformable(Data(#"{"value":99}"#.utf8))),
                ("position", AttributeValue.transformable(Data(#"{"y":1}"#.utf8))),
            ]
            for (key, value) in refused {
                var failure: (any Error)?
                do { try gauge.setValue(value, forKey: key) } catch { failure = error }
                #expect(Self.isTypeMismatch(failure, key: key), "\(key) = \(value): \(String(describing: failure))")
            }
            #expect(!context.hasChanges && gauge.level == Level(1) && gauge.position == nil)
            try gauge.setValue(Level(10), forKey: "level")
            try gauge.setValue(AttributeValue.transformable(Data(#"{"x":2}"#.utf8)), forKey: "position")
            try context.save()
        }
        let read = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<Gauge>()).map { [$0.level.value, Int($0.position?.x ?? -1)] }
        }
        #expect(read == [[10, 2]])
    }

    @Test("the typed setter cannot throw: a value that cannot be read back is not stored (neither as nil nor as bytes), and the next save fails with the type mismatch until the property is set again")
    func typedSetterRefuses() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await Self.coordinator(in: directory.url)
        let context = ManagedObjectContext(.privateQueue, coordinator: coordinator)
        try await context.perform { context in
            let gauge = Gauge()
            gauge.position = Position(x: 1)
            try context.insert(gauge)
            try context.save()

            gauge.level = Level(42)
            gauge.position = Position(x: -.infinity)
            gauge.name = "kept"
            #expect(gauge.level == Level(1) && gauge.position == Position(x: 1))
            var failure: (any Error)?
            do { try context.save() } catch { failure = error }
            #expect(Self.isTypeMismatch(failure, key: "level") || Self.isTypeMismatch(failure, key: "position"), "\(String(describing: failure))")
            gauge.level = Level(3)
            do { try context.save() } catch { failure = error }
            #expect(Self.isTypeMismatch(failure, key: "position"), "the position is still refused")
            gauge.position = nil   // nil is a value an optional attribute may take
            try context.save()
        }
        let read = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            try context.fetch(FetchRequest<Gauge>()).map { "\($0.level.value) \($0.position == nil) \($0.name)" }
        }
        #expect(read == ["3 true kept"])
    }

    @Test("a refused value set before the object is in a context fails the save of the context it is inserted into; set again, it saves")
    func refusedBeforeInsertion() async throws {
        let directory = TemporaryDirectory()
        let coordinator = try await Self.coordinator(in: directory.url)
        let read = try await ManagedObjectContext(.privateQueue, coordinator: coordinator).perform { context in
            let refused = Gauge()
            refused.level = Level(-1)
            let overwritten = Gauge()
            overwritten.level = Level(99)
            overwritten.level = Level(4)   // set again before insertion: nothing to report
            try context.insert(refused)
            try context.insert(overwritten)
            var failure: (any Error)?
            do { try context.save() } catch { failure = error }
            #expect(Self.isTypeMismatch(failure, key: "level"), "\(String(describing: failure))")
            refused.level = Level(2)
            let dropped = Gauge()
            dropped.level = Level(50)
            try context.insert(dropped)
            try context.delete(dropped)   // deleted: its refused edit no longer matters
            try context.save()
            return try context.fetch(FetchRequest<Gauge>()).map(\.level.value).sorted()
        }
        #expect(read == [2, 4])
    }
}
