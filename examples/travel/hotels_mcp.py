"""The travel team's hotels service as an MCP server over stdio: a team's own tool, in Python.

Two tools, answered from the table below so a test can rely on them:
- search_hotels(city): the hotels with a free room in a city, cheapest first;
- book_hotel(hotel_id, nights): books the nights and returns the confirmation.

Needs the official MCP SDK (`pip install mcp`); examples/travel/travel.yaml starts it.
"""

from mcp.server.fastmcp import FastMCP

HOTELS = {
    "lisbon": [
        {"hotel_id": "LIS-2", "name": "Casa Alfama", "per_night_eur": 95},
        {"hotel_id": "LIS-1", "name": "Hotel Lisboa", "per_night_eur": 140},
    ],
    "porto": [
        {"hotel_id": "OPO-1", "name": "Ribeira Inn", "per_night_eur": 88},
    ],
}

server = FastMCP("hotels")


@server.tool()
def search_hotels(city: str) -> dict:
    """Hotels with a free room in a city, cheapest first."""
    found = HOTELS.get(city.strip().lower())
    if found is None:
        raise ValueError(f"no hotels in {city}; try one of: {', '.join(sorted(HOTELS))}")
    return {"city": city, "hotels": found}


@server.tool()
def book_hotel(hotel_id: str, nights: int) -> dict:
    """Books `nights` nights at the hotel `hotel_id`; returns the confirmation."""
    hotel = next((h for hs in HOTELS.values() for h in hs if h["hotel_id"] == hotel_id), None)
    if hotel is None:
        raise ValueError(f"unknown hotel {hotel_id}")
    if not 1 <= nights <= 30:
        raise ValueError("nights must be between 1 and 30")
    return {
        "confirmation": f"{hotel_id}-{nights}N",
        "hotel": hotel["name"],
        "nights": nights,
        "total_eur": nights * hotel["per_night_eur"],
    }


if __name__ == "__main__":
    server.run()
