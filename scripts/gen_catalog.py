#!/usr/bin/env python3
"""Generates the offline offer catalog and a sample purchase history.

    python3 scripts/gen_catalog.py      # rewrites data/catalog.json and data/purchases.json

Deterministic (fixed seed, no dependencies): the outputs are checked in, and running the script
again gives the same bytes. The shopping agent's tools read these files (embedded at build time).
"""
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
rng = random.Random(20261122)

# category -> (brands, products, tags)
CATEGORIES = {
    "coffee": (["Blue Peak", "Morning Ritual", "Roastworks", "Café Sol", "Daybreak"],
               ["Ground Coffee", "Whole Bean Coffee", "Coffee Pods", "Cold Brew", "Instant Coffee", "Espresso Beans"],
               ["coffee", "caffeine", "breakfast", "beans", "brew"]),
    "tea": (["Leaf & Kettle", "Green Garden", "Chai Co."],
            ["Green Tea", "Black Tea Bags", "Chai Concentrate", "Herbal Tea", "Iced Tea"],
            ["tea", "drinks", "caffeine"]),
    "snacks": (["Crunch Town", "Nutty Bros", "Salt & Co.", "Poppin'"],
               ["Potato Chips", "Trail Mix", "Pretzels", "Popcorn", "Granola Bars", "Tortilla Chips"],
               ["snacks", "chips", "party"]),
    "dairy": (["Meadow Fresh", "Green Hill Farms", "Alp Valley"],
              ["Greek Yogurt", "Whole Milk", "Oat Milk", "Cheddar Cheese", "Butter", "Coffee Creamer"],
              ["dairy", "milk", "breakfast", "fridge"]),
    "beverages": (["Fizz Up", "Pure Spring", "Citrus Bay", "Bolt"],
                  ["Sparkling Water", "Orange Juice", "Energy Drink", "Sports Drink", "Lemonade", "Cola 12-pack"],
                  ["drinks", "soda", "juice", "water"]),
    "breakfast": (["Sunny Fields", "Oat Haven", "Golden Morning"],
                  ["Cereal", "Oatmeal", "Pancake Mix", "Maple Syrup", "Granola"],
                  ["breakfast", "cereal", "morning"]),
    "bakery": (["Hearth & Home", "Daily Loaf"],
               ["Sandwich Bread", "Bagels", "Croissants", "Tortillas", "Muffins"],
               ["bakery", "bread"]),
    "frozen": (["Polar Pantry", "Ice Kitchen", "Nonna's"],
               ["Frozen Pizza", "Ice Cream", "Frozen Vegetables", "Frozen Waffles", "Frozen Burritos"],
               ["frozen", "dinner", "dessert"]),
    "pantry": (["Home Table", "Spice Route", "Nonna's"],
               ["Pasta", "Pasta Sauce", "Olive Oil", "Rice", "Canned Beans", "Peanut Butter"],
               ["pantry", "dinner", "cooking"]),
    "household": (["Sparkle", "FreshHome", "EcoClean"],
                  ["Laundry Detergent", "Dish Soap", "Paper Towels", "Trash Bags", "All-Purpose Cleaner"],
                  ["household", "cleaning", "home"]),
    "personal care": (["Glow", "PureSkin", "Smile Bright"],
                      ["Shampoo", "Body Wash", "Toothpaste", "Deodorant", "Face Moisturizer"],
                      ["personal care", "beauty", "health"]),
    "baby": (["Little Sprout", "Cozy Baby"],
             ["Diapers", "Baby Wipes", "Baby Food Pouches", "Infant Formula"],
             ["baby", "family"]),
    "pet": (["Happy Paws", "Whisker Co."],
            ["Dry Dog Food", "Cat Litter", "Dog Treats", "Wet Cat Food"],
            ["pet", "dog", "cat"]),
    "health": (["VitaWell", "CareFirst"],
               ["Multivitamin", "Pain Reliever", "Allergy Relief", "Protein Powder"],
               ["health", "vitamins", "wellness"]),
}
RETAILERS = ["any store", "FreshMart", "ValueGrocer", "QuickStop", "MegaMart", "Corner Pharmacy"]
REQUIREMENTS = [("Buy 1", 1), ("Buy 2", 2), ("Buy 3", 3), ("Spend $10", 10), ("Spend $20", 20)]


def offers():
    out = []
    names = sorted(CATEGORIES)
    n = 0
    while len(out) < 240:
        category = names[n % len(names)]
        n += 1
        brands, products, tags = CATEGORIES[category]
        brand, product = rng.choice(brands), rng.choice(products)
        requirement, qty = rng.choice(REQUIREMENTS)
        points = rng.choice([100, 150, 200, 250, 300, 400, 500, 750, 1000, 1500, 2000])
        retailer = rng.choice(RETAILERS)
        month, day = rng.randint(1, 12), rng.randint(1, 28)
        where = "at any store" if retailer == "any store" else f"at {retailer}"
        requirement = f"{requirement} {brand} {product}" if qty < 10 else f"{requirement} on {brand} products"
        out.append({
            "id": f"off-{len(out) + 1:04d}",
            "title": f"{points} points on {brand} {product}",
            "brand": brand,
            "product": product,
            "category": category,
            "points": points,
            "requirement": requirement,
            "retailer": retailer,
            "expires": f"2027-{month:02d}-{day:02d}",
            "description": f"{requirement} {where} and scan your receipt to earn "
                           f"{points} points. One use per account.",
            "tags": tags,
        })
    return out


def purchases(catalog):
    history = []
    for i in range(24):
        offer = rng.choice(catalog)
        month, day = rng.randint(1, 10), rng.randint(1, 28)
        price = round(rng.uniform(1.5, 24.0), 2)
        qty = rng.randint(1, 3)
        history.append({
            "receipt_id": f"rcpt-{i + 1:04d}",
            "date": f"2026-{month:02d}-{day:02d}",
            "retailer": rng.choice(RETAILERS[1:]),
            "product": f"{offer['brand']} {offer['product']}",
            "category": offer["category"],
            "quantity": qty,
            "total": round(price * qty, 2),
            "points_earned": rng.choice([0, 25, 50, 100, offer["points"]]),
        })
    history.sort(key=lambda p: p["date"], reverse=True)
    return {"local": history}


def write(name, value):
    path = ROOT / "data" / name
    path.write_text(json.dumps(value, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    catalog = offers()
    write("catalog.json", {"offers": catalog})
    write("purchases.json", purchases(catalog))
